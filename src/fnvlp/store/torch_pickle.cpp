#include "fnvlp/store/torch_pickle.hpp"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <map>
#include <memory>

#include "fnvlp/core/error.hpp"
#include "fnvlp/store/pickle.hpp"

namespace fnvlp::store {

namespace {

torch::ScalarType storage_dtype(const std::string& storage_type) {
  static const std::map<std::string, torch::ScalarType> types = {
      {"torch.FloatStorage", torch::kFloat},       {"torch.HalfStorage", torch::kHalf},
      {"torch.BFloat16Storage", torch::kBFloat16}, {"torch.DoubleStorage", torch::kDouble},
      {"torch.LongStorage", torch::kLong},         {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort},       {"torch.CharStorage", torch::kChar},
      {"torch.ByteStorage", torch::kByte},         {"torch.BoolStorage", torch::kBool}};
  return types.at(storage_type);  // read_pickled_state_dict admits no other
}

}  // namespace

struct TorchSaveFile::Impl {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
};

TorchSaveFile::TorchSaveFile(const std::string& path) : path_(path), impl_(new Impl) {
  std::string pickle;
  try {
    impl_->reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    FNVLP_CHECK(impl_->reader->hasRecord("data.pkl"), path << ": a zip without data.pkl");
    if (impl_->reader->hasRecord("byteorder")) {
      auto [ptr, n] = impl_->reader->getRecord("byteorder");
      const std::string order(static_cast<const char*>(ptr.get()), n);
      FNVLP_CHECK(order == "little", path << ": tensors stored " << order << "-endian");
    }
    auto [ptr, n] = impl_->reader->getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(ptr.get()), n);
  } catch (const fnvlp::Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string why = e.what();
    FNVLP_FAIL(path << ": not a readable torch.save file: " << why.substr(0, why.find('\n')));
  }
  for (const PickledTensor& p : read_pickled_state_dict(path, pickle)) {
    TorchSaveTensor t;
    t.name = p.name;
    t.storage = p.storage;
    t.dtype = storage_dtype(p.storage_type);
    t.offset = p.offset;
    t.size = p.size;
    t.stride = p.stride;
    t.storage_numel = p.storage_numel;
    tensors_.push_back(std::move(t));
  }
}

TorchSaveFile::~TorchSaveFile() = default;

torch::Tensor TorchSaveFile::read(const TorchSaveTensor& t) const {
  at::DataPtr ptr;
  size_t bytes = 0;
  try {
    std::tie(ptr, bytes) = impl_->reader->getRecord(t.storage);
  } catch (const std::exception& e) {
    std::string why = e.what();
    FNVLP_FAIL(path_ << ": tensor '" << t.name << "': record " << t.storage
                     << " cannot be read: " << why.substr(0, why.find('\n')));
  }
  const auto es = static_cast<int64_t>(c10::elementSize(t.dtype));
  FNVLP_CHECK(static_cast<int64_t>(bytes) >= t.storage_numel * es,
              path_ << ": tensor '" << t.name << "': record " << t.storage << " holds " << bytes
                    << " bytes, its storage needs " << t.storage_numel * es);
  if (t.storage_numel == 0) return torch::empty(t.size, torch::TensorOptions().dtype(t.dtype));
  auto* base = static_cast<char*>(ptr.get());
  const auto view = torch::from_blob(base + t.offset * es, t.size, t.stride,
                                     torch::TensorOptions().dtype(t.dtype));
  return view.clone(torch::MemoryFormat::Contiguous);
}

}  // namespace fnvlp::store
