#pragma once
// State dicts from torch.save files (the zip format of PyTorch >= 1.6): libtorch's zip reader
// opens the archive, store/pickle.hpp runs its data.pkl, and each tensor's storage record is read
// only when the tensor is asked for, so a 900 MB checkpoint is never held whole.
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

namespace fnvlp::store {

struct TorchSaveTensor {
  std::string name;     // its key path, '.'-joined, after unwrapping (see read_torch_state_dict)
  std::string storage;  // the record holding its bytes (data/KEY)
  torch::ScalarType dtype = torch::kFloat;
  int64_t offset = 0;  // in elements
  std::vector<int64_t> size, stride;
  int64_t storage_numel = 0;
};

class TorchSaveFile {
 public:
  // Opens PATH and runs its pickle; throws fnvlp::Error naming the file on anything malformed.
  explicit TorchSaveFile(const std::string& path);
  ~TorchSaveFile();
  TorchSaveFile(const TorchSaveFile&) = delete;
  TorchSaveFile& operator=(const TorchSaveFile&) = delete;

  // The state dict's tensors: the top-level dict, or its "model" / "state_dict" / "module" entry
  // when that is a dict (a training checkpoint's wrapper).
  const std::vector<TorchSaveTensor>& tensors() const { return tensors_; }
  // A copy of one tensor's values (its own storage, contiguous).
  torch::Tensor read(const TorchSaveTensor& t) const;

 private:
  struct Impl;
  std::string path_;
  std::vector<TorchSaveTensor> tensors_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fnvlp::store
