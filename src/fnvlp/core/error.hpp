#pragma once
// Errors are exceptions that carry the source location where they were raised, so a failure on
// any rank names file:line in its log before the job aborts (ARCHITECTURE.md §10, §12).
#include <sstream>
#include <stdexcept>
#include <string>

namespace fnvlp {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line);
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
std::string h5_error_stack();
}  // namespace detail

}  // namespace fnvlp

// FNVLP_CHECK(cond, a << b ...): throws fnvlp::Error naming the failed condition and file:line.
#define FNVLP_CHECK(cond, msg)                                           \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::ostringstream fnvlp_os_;                                      \
      fnvlp_os_ << msg << " [check failed: " #cond "]";                  \
      ::fnvlp::detail::throw_error(__FILE__, __LINE__, fnvlp_os_.str()); \
    }                                                                    \
  } while (0)

#define FNVLP_FAIL(msg)                                                \
  do {                                                                 \
    std::ostringstream fnvlp_os_;                                      \
    fnvlp_os_ << msg;                                                  \
    ::fnvlp::detail::throw_error(__FILE__, __LINE__, fnvlp_os_.str()); \
  } while (0)

// H5_CHECK(H5Xxx(...), context): every HDF5 return is checked; a negative id or status throws
// with the caller's context (file and dataset) and the top of HDF5's own error stack.
#define H5_CHECK(call, context)                                                          \
  ([&]() {                                                                               \
    auto fnvlp_h5_rc_ = (call);                                                          \
    if (fnvlp_h5_rc_ < 0) {                                                              \
      std::ostringstream fnvlp_os_;                                                      \
      fnvlp_os_ << context << ": " #call " failed" << ::fnvlp::detail::h5_error_stack(); \
      ::fnvlp::detail::throw_error(__FILE__, __LINE__, fnvlp_os_.str());                 \
    }                                                                                    \
    return fnvlp_h5_rc_;                                                                 \
  }())
