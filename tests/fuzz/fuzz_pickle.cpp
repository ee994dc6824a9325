// libFuzzer target: the pickle of a torch.save file (store/pickle.hpp), what fnvlp-pretrain
// --init-from runs on data.pkl from a checkpoint's zip. Any input must give tensor descriptors or
// throw fnvlp::Error, never crash, recurse without bound or allocate beyond its own size; every
// descriptor returned must lie within its storage.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fnvlp/core/error.hpp"
#include "fnvlp/store/pickle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& t : fnvlp::store::read_pickled_state_dict("fuzz/data.pkl", bytes)) {
      if (fnvlp::store::pickled_element_size(t.storage_type) <= 0) std::abort();
      if (t.size.size() != t.stride.size() || t.offset < 0) std::abort();
      __int128 last = t.offset;
      bool empty = false;
      for (size_t d = 0; d < t.size.size(); ++d) {
        if (t.size[d] == 0) empty = true;
        last += static_cast<__int128>(t.size[d] > 0 ? t.size[d] - 1 : 0) * t.stride[d];
      }
      if (!empty && last >= t.storage_numel) std::abort();
    }
  } catch (const fnvlp::Error&) {
  }
  return 0;
}
