#pragma once
// The pickle of a torch.save file (data.pkl inside its zip; PyTorch >= 1.6), run by a small
// machine of our own for the opcodes torch.save emits (protocols 2-5), without torch: what
// store/torch_pickle.hpp reads, and the fuzz target's entry point. It builds dicts (OrderedDict
// and dict), lists, tuples, strings, numbers, booleans, None, and tensor descriptors from
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter over typed storages; other classes
// (argparse.Namespace in a training checkpoint, say) become opaque values and nothing is ever
// executed. libtorch's torch::pickle_load, by contrast, reads the whole file into memory and, in
// 1.13, rejects the single-item SETITEM that {"model": state_dict} (DeiT's, ALBEF's checkpoints)
// pickles to.
#include <cstdint>
#include <string>
#include <vector>

namespace fnvlp::store {

struct PickledTensor {
  std::string name;          // its key in the state dict
  std::string storage;       // the zip record holding its bytes (data/KEY)
  std::string storage_type;  // torch.FloatStorage, torch.HalfStorage, ...
  int64_t offset = 0;        // in elements
  std::vector<int64_t> size, stride;
  int64_t storage_numel = 0;  // elements of the storage; the view lies within it
};

// Bytes per element of a typed storage class name; 0 for one fnvlp does not read.
int pickled_element_size(const std::string& storage_type);

// Runs the pickle `bytes` of `file`; returns the tensors under string keys of the top-level dict,
// or of its "model" / "state_dict" / "module" entry when that is a dict (a checkpoint's wrapper).
// Throws fnvlp::Error naming the file and byte offset on anything malformed.
std::vector<PickledTensor> read_pickled_state_dict(const std::string& file,
                                                   const std::string& bytes);

}  // namespace fnvlp::store
