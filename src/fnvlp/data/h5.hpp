#pragma once
// Thin RAII layer over the HDF5 C API. Every call is checked (H5_CHECK) and every error names the
// file and the object, so a Fletcher32 failure reads "shard-00003.h5:/images: ...".
#include <hdf5.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "fnvlp/core/error.hpp"

namespace fnvlp::h5 {

// Turns off HDF5's automatic error printing (errors arrive as exceptions instead). Idempotent.
void quiet();

// Debian's HDF5 is not built thread-safe: every HDF5 call made off the main thread (the data
// prefetch thread, for one) and every call that may overlap with one holds this lock.
std::mutex& global_mutex();

class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*closer)(hid_t)) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: handles are passed straight to the C API
  // Closes now and reports failure (a failed close of a written file means lost data).
  void close(const std::string& context);

 private:
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
  }
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*closer_)(hid_t) = nullptr;
};

template <typename T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, uint8_t>)
    return H5T_NATIVE_UINT8;
  else if constexpr (std::is_same_v<T, int16_t>)
    return H5T_NATIVE_INT16;
  else if constexpr (std::is_same_v<T, int32_t>)
    return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return H5T_NATIVE_INT64;
  else if constexpr (std::is_same_v<T, float>)
    return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return H5T_NATIVE_DOUBLE;
  else
    static_assert(sizeof(T) == 0, "no HDF5 type for this C++ type");
}

// Files are created without object modification times, so the same content gives the same bytes
// (shards are reproducible and comparable by sha256 across runs and rank counts).
Handle create_file(const std::string& path);
Handle open_file(const std::string& path, bool writable = false);
Handle open_dataset(hid_t loc, const std::string& name, const std::string& file);
bool exists(hid_t loc, const std::string& name);

void write_attr_int(hid_t obj, const std::string& name, int64_t value);
void write_attr_string(hid_t obj, const std::string& name, const std::string& value);
void write_attr_double(hid_t obj, const std::string& name, double value);
double read_attr_double(hid_t obj, const std::string& name, const std::string& context);
int64_t read_attr_int(hid_t obj, const std::string& name, const std::string& context);
std::string read_attr_string(hid_t obj, const std::string& name, const std::string& context);

std::vector<hsize_t> dims(hid_t dataset, const std::string& context);

struct DatasetSpec {
  std::vector<hsize_t> dims;
  std::vector<hsize_t> chunk;  // required: every fnvlp dataset is chunked
  bool extendible = false;     // unlimited first dimension (append_rows)
  bool fletcher32 = true;
  // Every chunk allocated and zero-filled at creation, in order: the file's layout does not depend
  // on the order its rows are written in (several writers give the bytes of one).
  bool early_alloc = false;
};
Handle create_dataset(hid_t loc, const std::string& name, hid_t type, const DatasetSpec& spec,
                      const std::string& file);

// The stored form a reader requires of a chunked dataset before its first H5Dread.
// libhdf5 1.10 trusts a file's metadata: a stored chunk smaller than its datatype and chunk shape
// imply (a mutated datatype size, for one) makes H5Dread copy past a buffer of libhdf5's own
// (tests/fuzz/README.md). Readers of files we write state what the writer produced and refuse the
// rest by name, reading only metadata (no chunk data).
struct StoredLayout {
  hid_t mem_type = H5I_INVALID_HID;  // read as this type: stored type is it, in either byte order
  int64_t rows = -1;                 // first dimension; -1: any
  std::vector<hsize_t> row_shape;    // the other dimensions, exact
  hsize_t max_chunk_rows = 1;        // chunk = [1..max_chunk_rows] x row_shape
  bool fletcher32 = true;            // filter pipeline: exactly Fletcher32 (false: no filter)
};
// Checks datatype, dataspace, chunked layout, chunk shape, filter pipeline, and every chunk the
// dataspace covers: stored, and exactly as many bytes as its shape, datatype and Fletcher32 make.
// Throws fnvlp::Error "CONTEXT: reason". Returns the dims.
std::vector<hsize_t> check_stored_layout(hid_t dataset, const StoredLayout& expect,
                                         const std::string& context);

// Writes `n_rows` rows (each of the dataset's row size) at row `row`; with `extend` the dataset is
// first grown to row + n_rows.
void write_rows(hid_t dataset, hid_t mem_type, const void* data, hsize_t row, hsize_t n_rows,
                bool extend, const std::string& context);
// Reads rows row, row + stride, ... (n_rows of them; one selection, so each chunk is read once).
void read_rows(hid_t dataset, hid_t mem_type, void* out, hsize_t row, hsize_t n_rows,
               const std::string& context, hsize_t stride = 1);

template <typename T>
void write_dataset(hid_t loc, const std::string& name, const std::vector<T>& data,
                   const std::vector<hsize_t>& shape, const std::vector<hsize_t>& chunk,
                   const std::string& file) {
  Handle ds = create_dataset(loc, name, native_type<T>(), {shape, chunk, false, true}, file);
  if (!shape.empty() && shape[0] > 0)
    write_rows(ds, native_type<T>(), data.data(), 0, shape[0], false, file + ":/" + name);
  ds.close(file + ":/" + name);
}

template <typename T>
std::vector<T> read_dataset(hid_t loc, const std::string& name, const std::string& file,
                            std::vector<hsize_t>* shape_out = nullptr) {
  Handle ds = open_dataset(loc, name, file);
  const std::string ctx = file + ":/" + name;
  std::vector<hsize_t> shape = dims(ds, ctx);
  size_t n = 1;
  for (hsize_t d : shape) n *= static_cast<size_t>(d);
  std::vector<T> out(n);
  if (n > 0) read_rows(ds, native_type<T>(), out.data(), 0, shape[0], ctx);
  if (shape_out) *shape_out = shape;
  return out;
}

}  // namespace fnvlp::h5
