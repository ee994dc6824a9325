#include "fnvlp/data/h5.hpp"

#include <mutex>
#include <sstream>

namespace fnvlp::h5 {

void quiet() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

std::mutex& global_mutex() {
  static std::mutex m;
  return m;
}

void Handle::close(const std::string& context) {
  if (id_ < 0) return;
  const hid_t id = std::exchange(id_, H5I_INVALID_HID);
  H5_CHECK(closer_(id), context << ": close");
}

Handle create_file(const std::string& path) {
  quiet();
  Handle fcpl(H5_CHECK(H5Pcreate(H5P_FILE_CREATE), path), H5Pclose);
  H5_CHECK(H5Pset_obj_track_times(fcpl, false), path);  // root group: no timestamps either
  // The 1.10 file format: superblock v3, object headers v2 and chunk indexes whose checksums
  // libhdf5 checks on every metadata read, so rotten metadata is an error rather than input to
  // its decoders. Readable by HDF5 1.10 and later; files in the older format still open.
  Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), path), H5Pclose);
  H5_CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110), path);
  Handle file(H5_CHECK(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl),
                       "cannot create HDF5 file '" << path << "'"),
              H5Fclose);
  return file;
}

Handle open_file(const std::string& path, bool writable) {
  quiet();
  return Handle(
      H5_CHECK(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT),
               "cannot open HDF5 file '" << path << "'"),
      H5Fclose);
}

Handle open_dataset(hid_t loc, const std::string& name, const std::string& file) {
  FNVLP_CHECK(exists(loc, name), file << ": dataset '/" << name << "' is missing");
  return Handle(H5_CHECK(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), file << ":/" << name), H5Dclose);
}

bool exists(hid_t loc, const std::string& name) {
  return H5_CHECK(H5Lexists(loc, name.c_str(), H5P_DEFAULT), "H5Lexists " << name) > 0;
}

namespace {
// A scalar attribute stored as `file_type` from a value in memory type `mem_type`.
void write_scalar_attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type,
                       const void* value) {
  Handle space(H5_CHECK(H5Screate(H5S_SCALAR), name), H5Sclose);
  Handle attr(H5_CHECK(H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                       "attribute " << name),
              H5Aclose);
  H5_CHECK(H5Awrite(attr, mem_type, value), "attribute " << name);
}
}  // namespace

void write_attr_int(hid_t obj, const std::string& name, int64_t value) {
  write_scalar_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_attr_double(hid_t obj, const std::string& name, double value) {
  write_scalar_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

double read_attr_double(hid_t obj, const std::string& name, const std::string& context) {
  FNVLP_CHECK(H5Aexists(obj, name.c_str()) > 0,
              context << ": attribute '" << name << "' is missing");
  Handle attr(H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT), context << ": attribute " << name),
              H5Aclose);
  double v = 0;
  H5_CHECK(H5Aread(attr, H5T_NATIVE_DOUBLE, &v), context << ": attribute " << name);
  return v;
}

void write_attr_string(hid_t obj, const std::string& name, const std::string& value) {
  Handle type(H5_CHECK(H5Tcopy(H5T_C_S1), name), H5Tclose);
  H5_CHECK(H5Tset_size(type, value.empty() ? 1 : value.size()), name);
  H5_CHECK(H5Tset_cset(type, H5T_CSET_UTF8), name);
  Handle space(H5_CHECK(H5Screate(H5S_SCALAR), name), H5Sclose);
  Handle attr(H5_CHECK(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                       "attribute " << name),
              H5Aclose);
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  H5_CHECK(H5Awrite(attr, type, padded.data()), "attribute " << name);
}

namespace {
// fnvlp writes every attribute as a scalar; an array where a scalar belongs would be read past
// the one value's buffer.
void check_scalar_attr(hid_t attr, const std::string& name, const std::string& context) {
  Handle space(H5_CHECK(H5Aget_space(attr), context << ": attribute " << name), H5Sclose);
  FNVLP_CHECK(H5Sget_simple_extent_type(space) == H5S_SCALAR,
              context << ": attribute '" << name << "' is not a scalar");
}
}  // namespace

int64_t read_attr_int(hid_t obj, const std::string& name, const std::string& context) {
  FNVLP_CHECK(H5Aexists(obj, name.c_str()) > 0,
              context << ": attribute '" << name << "' is missing");
  Handle attr(H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT), context << ": attribute " << name),
              H5Aclose);
  Handle type(H5_CHECK(H5Aget_type(attr), context << ": attribute " << name), H5Tclose);
  FNVLP_CHECK(H5Tget_class(type) == H5T_INTEGER,
              context << ": attribute '" << name << "' is not an integer");
  check_scalar_attr(attr, name, context);
  int64_t v = 0;
  H5_CHECK(H5Aread(attr, H5T_NATIVE_INT64, &v), context << ": attribute " << name);
  return v;
}

std::string read_attr_string(hid_t obj, const std::string& name, const std::string& context) {
  FNVLP_CHECK(H5Aexists(obj, name.c_str()) > 0,
              context << ": attribute '" << name << "' is missing");
  Handle attr(H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT), context << ": attribute " << name),
              H5Aclose);
  Handle type(H5_CHECK(H5Aget_type(attr), context << ": attribute " << name), H5Tclose);
  FNVLP_CHECK(H5Tget_class(type) == H5T_STRING && !H5Tis_variable_str(type),
              context << ": attribute '" << name << "' is not a fixed-length string");
  check_scalar_attr(attr, name, context);
  const size_t size = H5Tget_size(type);
  std::string out(size, '\0');
  H5_CHECK(H5Aread(attr, type, out.data()), context << ": attribute " << name);
  out.resize(out.find('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

std::vector<hsize_t> dims(hid_t dataset, const std::string& context) {
  Handle space(H5_CHECK(H5Dget_space(dataset), context), H5Sclose);
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space), context);
  std::vector<hsize_t> out(static_cast<size_t>(rank));
  H5_CHECK(H5Sget_simple_extent_dims(space, out.data(), nullptr), context);
  return out;
}

Handle create_dataset(hid_t loc, const std::string& name, hid_t type, const DatasetSpec& spec,
                      const std::string& file) {
  const std::string ctx = file + ":/" + name;
  FNVLP_CHECK(spec.chunk.size() == spec.dims.size() && !spec.dims.empty(),
              ctx << ": bad chunk rank");
  std::vector<hsize_t> maxdims = spec.dims;
  if (spec.extendible) maxdims[0] = H5S_UNLIMITED;
  // A zero-row dataset still needs a positive chunk shape.
  std::vector<hsize_t> chunk = spec.chunk;
  for (auto& c : chunk) c = c == 0 ? 1 : c;
  Handle space(H5_CHECK(H5Screate_simple(static_cast<int>(spec.dims.size()), spec.dims.data(),
                                         maxdims.data()),
                        ctx),
               H5Sclose);
  Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), ctx), H5Pclose);
  H5_CHECK(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), ctx);
  if (spec.fletcher32) H5_CHECK(H5Pset_fletcher32(dcpl), ctx);
  if (spec.early_alloc) {
    // Chunks no writer fills read back as zeros (not whatever the file space held).
    const unsigned char zero[16] = {};
    FNVLP_CHECK(H5Tget_size(type) <= sizeof(zero), ctx << ": fill value wider than 16 bytes");
    H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), ctx);
    H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_ALLOC), ctx);
    H5_CHECK(H5Pset_fill_value(dcpl, type, zero), ctx);
  }
  H5_CHECK(H5Pset_obj_track_times(dcpl, false), ctx);
  return Handle(H5_CHECK(H5Dcreate2(loc, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                         ctx << ": create"),
                H5Dclose);
}

namespace {

std::string describe_type(hid_t t) {
  std::ostringstream os;
  const H5T_class_t cls = H5Tget_class(t);
  if (cls == H5T_INTEGER)
    os << (H5Tget_sign(t) == H5T_SGN_NONE ? "unsigned" : "signed") << " integer";
  else if (cls == H5T_FLOAT)
    os << "float";
  else
    os << "non-numeric type (class " << static_cast<int>(cls) << ")";
  os << " of " << H5Tget_size(t) << " bytes";
  if (cls == H5T_INTEGER || cls == H5T_FLOAT) {
    const H5T_order_t order = H5Tget_order(t);
    os << (order == H5T_ORDER_BE ? ", big-endian" : order == H5T_ORDER_LE ? ", little-endian" : "");
    if (H5Tget_precision(t) != 8 * H5Tget_size(t) || H5Tget_offset(t) != 0)
      os << ", " << H5Tget_precision(t) << " bits of precision at bit " << H5Tget_offset(t);
  }
  return os.str();
}

// The stored type equals `mem` up to byte order (HDF5 swaps bytes, never changes sizes for us).
bool same_type_any_order(hid_t stored, hid_t mem, const std::string& context) {
  for (const H5T_order_t order : {H5T_ORDER_LE, H5T_ORDER_BE}) {
    Handle t(H5_CHECK(H5Tcopy(mem), context), H5Tclose);
    H5_CHECK(H5Tset_order(t, order), context);
    if (H5_CHECK(H5Tequal(stored, t), context) > 0) return true;
  }
  return false;
}

hsize_t checked_mul(hsize_t a, hsize_t b, const std::string& context) {
  hsize_t r = 0;
  FNVLP_CHECK(!__builtin_mul_overflow(a, b, &r), context << ": chunk size overflows");
  return r;
}

}  // namespace

std::vector<hsize_t> check_stored_layout(hid_t dataset, const StoredLayout& expect,
                                         const std::string& context) {
  const std::string& ctx = context;
  // Datatype: exactly what the writer stored (byte order aside).
  {
    Handle type(H5_CHECK(H5Dget_type(dataset), ctx << ": datatype"), H5Tclose);
    FNVLP_CHECK(same_type_any_order(type, expect.mem_type, ctx),
                ctx << ": stored datatype is " << describe_type(type) << ", the schema has "
                    << describe_type(expect.mem_type));
  }
  // Dataspace: simple, [rows, row_shape...].
  std::vector<hsize_t> dims;
  {
    Handle space(H5_CHECK(H5Dget_space(dataset), ctx << ": dataspace"), H5Sclose);
    FNVLP_CHECK(H5Sget_simple_extent_type(space) == H5S_SIMPLE,
                ctx << ": dataspace is not a simple array");
    const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space), ctx << ": dataspace");
    FNVLP_CHECK(rank == static_cast<int>(expect.row_shape.size()) + 1,
                ctx << ": rank " << rank << ", the schema has " << expect.row_shape.size() + 1);
    dims.resize(static_cast<size_t>(rank));
    H5_CHECK(H5Sget_simple_extent_dims(space, dims.data(), nullptr), ctx << ": dataspace");
  }
  FNVLP_CHECK(expect.rows < 0 || dims[0] == static_cast<hsize_t>(expect.rows),
              ctx << ": " << dims[0] << " rows, expected " << expect.rows);
  for (size_t i = 1; i < dims.size(); ++i)
    FNVLP_CHECK(dims[i] == expect.row_shape[i - 1], ctx << ": dimension " << i << " is " << dims[i]
                                                        << ", expected "
                                                        << expect.row_shape[i - 1]);
  // Layout: chunked by whole rows, filters as written.
  Handle dcpl(H5_CHECK(H5Dget_create_plist(dataset), ctx << ": creation properties"), H5Pclose);
  FNVLP_CHECK(H5Pget_layout(dcpl) == H5D_CHUNKED, ctx << ": layout is not chunked");
  std::vector<hsize_t> chunk(dims.size() + 1, 0);  // one spare: a larger chunk rank shows
  const int chunk_rank = H5_CHECK(H5Pget_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()),
                                  ctx << ": chunk shape");
  FNVLP_CHECK(chunk_rank == static_cast<int>(dims.size()),
              ctx << ": chunk rank " << chunk_rank << ", dataset rank " << dims.size());
  FNVLP_CHECK(
      chunk[0] >= 1 && chunk[0] <= expect.max_chunk_rows,
      ctx << ": chunk of " << chunk[0] << " rows, the schema allows 1.." << expect.max_chunk_rows);
  for (size_t i = 1; i < dims.size(); ++i)
    FNVLP_CHECK(chunk[i] == dims[i], ctx << ": chunk dimension " << i << " is " << chunk[i]
                                         << ", not the whole row (" << dims[i] << ")");
  const int nfilters = H5_CHECK(H5Pget_nfilters(dcpl), ctx << ": filters");
  if (expect.fletcher32) {
    unsigned flags = 0;
    size_t nvalues = 0;
    FNVLP_CHECK(nfilters == 1 && H5Pget_filter2(dcpl, 0, &flags, &nvalues, nullptr, 0, nullptr,
                                                nullptr) == H5Z_FILTER_FLETCHER32,
                ctx << ": filter pipeline is not exactly Fletcher32 (" << nfilters << " filters)");
  } else {
    FNVLP_CHECK(nfilters == 0, ctx << ": " << nfilters << " filters, expected none");
  }
  // Every chunk: what its filters can produce from a full chunk (HDF5 stores edge chunks whole).
  hsize_t chunk_bytes = H5Tget_size(expect.mem_type);
  for (size_t i = 0; i < dims.size(); ++i) chunk_bytes = checked_mul(chunk_bytes, chunk[i], ctx);
  FNVLP_CHECK(chunk_bytes > 0 && chunk_bytes < (hsize_t{1} << 32),
              ctx << ": chunk of " << chunk_bytes << " bytes (HDF5 allows 1 byte to 4 GiB)");
  const hsize_t stored = chunk_bytes + (expect.fletcher32 ? 4 : 0);  // Fletcher32 appends 4 bytes
  const hsize_t n_chunks = dims[0] / chunk[0] + (dims[0] % chunk[0] != 0);
  hsize_t file_bytes = 0;
  {
    Handle file(H5_CHECK(H5Iget_file_id(dataset), ctx), H5Fclose);
    H5_CHECK(H5Fget_filesize(file, &file_bytes), ctx << ": file size");
  }
  // Bounds the loop below (and what a whole read allocates) by the file, whatever dims it claims.
  FNVLP_CHECK(n_chunks <= file_bytes / stored, ctx << ": " << n_chunks << " chunks of " << stored
                                                   << " bytes do not fit in a file of "
                                                   << file_bytes << " bytes");
  // H5Dget_chunk_storage_size looks the chunk up as H5Dread does (O(log n), ~1.5 us a chunk);
  // H5Dget_chunk_info* would give the filter mask and address too, but scans the whole chunk index
  // on every call in 1.10 (quadratic). Unchecked, a mask that skips Fletcher32 only loses the
  // checksum: the chunk is then read raw, and at this size still fills its whole buffer. A read
  // past the end of the file fails in HDF5.
  std::vector<hsize_t> offset(dims.size(), 0);
  for (hsize_t c = 0; c < n_chunks; ++c) {
    offset[0] = c * chunk[0];
    hsize_t size = 0;
    H5_CHECK(H5Dget_chunk_storage_size(dataset, offset.data(), &size),
             ctx << ": chunk index at row " << offset[0]);
    FNVLP_CHECK(size != 0, ctx << ": chunk not stored (chunk at row " << offset[0] << ")");
    FNVLP_CHECK(size == stored, ctx << ": chunk holds " << size << " bytes, its shape and datatype"
                                    << (expect.fletcher32 ? " with Fletcher32" : "") << " make "
                                    << stored << " (chunk at row " << offset[0] << ")");
  }
  return dims;
}

namespace {
// Selects rows [row, row + n_rows) of the dataset's file space.
// Rows row, row + stride, ... (n_rows of them).
Handle select_rows(hid_t dataset, hsize_t row, hsize_t n_rows, std::vector<hsize_t>* count,
                   const std::string& context, hsize_t stride = 1) {
  Handle fspace(H5_CHECK(H5Dget_space(dataset), context), H5Sclose);
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(fspace), context);
  std::vector<hsize_t> shape(static_cast<size_t>(rank));
  H5_CHECK(H5Sget_simple_extent_dims(fspace, shape.data(), nullptr), context);
  const hsize_t end = n_rows == 0 ? row : row + (n_rows - 1) * stride + 1;
  FNVLP_CHECK(stride >= 1 && end <= shape[0],
              context << ": rows [" << row << ", " << end << ") outside " << shape[0] << " rows");
  std::vector<hsize_t> start(shape.size(), 0), step(shape.size(), 1);
  start[0] = row;
  step[0] = stride;
  *count = shape;
  (*count)[0] = n_rows;
  H5_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), step.data(), count->data(),
                               nullptr),
           context);
  return fspace;
}
}  // namespace

void write_rows(hid_t dataset, hid_t mem_type, const void* data, hsize_t row, hsize_t n_rows,
                bool extend, const std::string& context) {
  if (n_rows == 0) return;
  if (extend) {
    std::vector<hsize_t> shape = dims(dataset, context);
    shape[0] = row + n_rows;
    H5_CHECK(H5Dset_extent(dataset, shape.data()), context << ": extend");
  }
  std::vector<hsize_t> count;
  Handle fspace = select_rows(dataset, row, n_rows, &count, context);
  Handle mspace(
      H5_CHECK(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), context),
      H5Sclose);
  H5_CHECK(H5Dwrite(dataset, mem_type, mspace, fspace, H5P_DEFAULT, data), context << ": write");
}

void read_rows(hid_t dataset, hid_t mem_type, void* out, hsize_t row, hsize_t n_rows,
               const std::string& context, hsize_t stride) {
  if (n_rows == 0) return;
  std::vector<hsize_t> count;
  Handle fspace = select_rows(dataset, row, n_rows, &count, context, stride);
  Handle mspace(
      H5_CHECK(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), context),
      H5Sclose);
  H5_CHECK(H5Dread(dataset, mem_type, mspace, fspace, H5P_DEFAULT, out), context << ": read");
}

}  // namespace fnvlp::h5
