#pragma once
// A config section lists each field once, as (type, name, default[, bounds]):
//
//   struct OptimConfig {
//     FNVLP_CONFIG_FIELDS(
//         (double, lr, 1e-4, config::above(0)),  // peak learning rate
//         (int64_t, warmup_steps, 100, config::at_least(0)),
//         (std::string, note, ))  // an empty default value-initializes
//   };
//
// declares the members `type name{default};` in that order and the visitor
// `template <class V> void fields(V& v)` that calls v("name", name, bounds) for each, which drives
// YAML loading, --set overrides, range checks and the dump of the resolved config
// (core/config.hpp). The key is the member's name. A numeric value outside its bounds (NaN
// included) is a load error naming the key, the value and the range. Members that are not config
// keys are declared outside the list. A type with a top-level comma needs an alias.
//
// An enum read and written by name lists each enumerator once, with its name:
//
//   FNVLP_CONFIG_ENUM(QSchedule, (kFixed, "fixed"), (kHardening, "hardening"))
//
// declares `enum class QSchedule { kFixed, kHardening };` and the `enum_names(QSchedule)` table
// that core/config.hpp looks up (a name outside it is a load error listing the names).
#include <limits>
#include <utility>
#include <vector>

namespace fnvlp::config {

// The range a numeric field must lie in; the default allows every value but NaN.
struct Bounds {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
};
constexpr Bounds at_least(double lo) { return {lo, std::numeric_limits<double>::infinity()}; }
constexpr Bounds above(double lo) {
  return {lo, std::numeric_limits<double>::infinity(), true, false};
}
constexpr Bounds within(double lo, double hi) { return {lo, hi}; }                  // [lo, hi]
constexpr Bounds half_open(double lo, double hi) { return {lo, hi, false, true}; }  // [lo, hi)
constexpr Bounds between(double lo, double hi) { return {lo, hi, true, true}; }     // (lo, hi)
constexpr Bounds above_to(double lo, double hi) { return {lo, hi, true, false}; }   // (lo, hi]

}  // namespace fnvlp::config

#define FNVLP_CONFIG_FIELDS(...)                        \
  FNVLP_PP_FOR_EACH(FNVLP_CONFIG_DECLARE_, __VA_ARGS__) \
  template <class V>                                    \
  void fields(V& v) {                                   \
    FNVLP_PP_FOR_EACH(FNVLP_CONFIG_VISIT_, __VA_ARGS__) \
  }

#define FNVLP_CONFIG_ENUM(E, ...)                                            \
  enum class E { FNVLP_PP_FOR_EACH(FNVLP_CONFIG_ENUMERATOR_, __VA_ARGS__) }; \
  inline const std::vector<std::pair<E, const char*>>& enum_names(E) {       \
    using fnvlp_enum_ = E;                                                   \
    static const std::vector<std::pair<E, const char*>> names = {            \
        FNVLP_PP_FOR_EACH(FNVLP_CONFIG_ENUM_NAME_, __VA_ARGS__)};            \
    return names;                                                            \
  }

#define FNVLP_CONFIG_ENUMERATOR_(entry) FNVLP_CONFIG_ENUMERATOR_IMPL_ entry
#define FNVLP_CONFIG_ENUMERATOR_IMPL_(value, name) value,
#define FNVLP_CONFIG_ENUM_NAME_(entry) FNVLP_CONFIG_ENUM_NAME_IMPL_ entry
#define FNVLP_CONFIG_ENUM_NAME_IMPL_(value, name) {fnvlp_enum_::value, name},

#define FNVLP_CONFIG_DECLARE_(field) FNVLP_CONFIG_DECLARE_IMPL_ field
#define FNVLP_CONFIG_DECLARE_IMPL_(type, name, ...) \
  type name{FNVLP_PP_EXPAND_(FNVLP_PP_FIRST_(__VA_ARGS__, unused))};
#define FNVLP_CONFIG_VISIT_(field) FNVLP_CONFIG_VISIT_IMPL_ field
#define FNVLP_CONFIG_VISIT_IMPL_(type, name, ...) \
  v(#name, name,                                  \
    FNVLP_PP_EXPAND_(FNVLP_PP_SECOND_(__VA_ARGS__, ::fnvlp::config::Bounds{}, unused)));

// FNVLP_PP_FOR_EACH(m, a, b, ...) expands to m(a) m(b) ...; at most 64 arguments.
#define FNVLP_PP_EXPAND_(x) x
#define FNVLP_PP_FIRST_(a, ...) a
#define FNVLP_PP_SECOND_(a, b, ...) b
#define FNVLP_PP_PICK_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, \
                       _18, _19, _20, _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32,  \
                       _33, _34, _35, _36, _37, _38, _39, _40, _41, _42, _43, _44, _45, _46, _47,  \
                       _48, _49, _50, _51, _52, _53, _54, _55, _56, _57, _58, _59, _60, _61, _62,  \
                       _63, _64, NAME, ...)                                                        \
  NAME
#define FNVLP_PP_FOR_EACH(m, ...)                                                                  \
  FNVLP_PP_EXPAND_(FNVLP_PP_PICK_(                                                                 \
      __VA_ARGS__, FNVLP_PP_FE_64, FNVLP_PP_FE_63, FNVLP_PP_FE_62, FNVLP_PP_FE_61, FNVLP_PP_FE_60, \
      FNVLP_PP_FE_59, FNVLP_PP_FE_58, FNVLP_PP_FE_57, FNVLP_PP_FE_56, FNVLP_PP_FE_55,              \
      FNVLP_PP_FE_54, FNVLP_PP_FE_53, FNVLP_PP_FE_52, FNVLP_PP_FE_51, FNVLP_PP_FE_50,              \
      FNVLP_PP_FE_49, FNVLP_PP_FE_48, FNVLP_PP_FE_47, FNVLP_PP_FE_46, FNVLP_PP_FE_45,              \
      FNVLP_PP_FE_44, FNVLP_PP_FE_43, FNVLP_PP_FE_42, FNVLP_PP_FE_41, FNVLP_PP_FE_40,              \
      FNVLP_PP_FE_39, FNVLP_PP_FE_38, FNVLP_PP_FE_37, FNVLP_PP_FE_36, FNVLP_PP_FE_35,              \
      FNVLP_PP_FE_34, FNVLP_PP_FE_33, FNVLP_PP_FE_32, FNVLP_PP_FE_31, FNVLP_PP_FE_30,              \
      FNVLP_PP_FE_29, FNVLP_PP_FE_28, FNVLP_PP_FE_27, FNVLP_PP_FE_26, FNVLP_PP_FE_25,              \
      FNVLP_PP_FE_24, FNVLP_PP_FE_23, FNVLP_PP_FE_22, FNVLP_PP_FE_21, FNVLP_PP_FE_20,              \
      FNVLP_PP_FE_19, FNVLP_PP_FE_18, FNVLP_PP_FE_17, FNVLP_PP_FE_16, FNVLP_PP_FE_15,              \
      FNVLP_PP_FE_14, FNVLP_PP_FE_13, FNVLP_PP_FE_12, FNVLP_PP_FE_11, FNVLP_PP_FE_10,              \
      FNVLP_PP_FE_9, FNVLP_PP_FE_8, FNVLP_PP_FE_7, FNVLP_PP_FE_6, FNVLP_PP_FE_5, FNVLP_PP_FE_4,    \
      FNVLP_PP_FE_3, FNVLP_PP_FE_2, FNVLP_PP_FE_1, unused)(m, __VA_ARGS__))
#define FNVLP_PP_FE_1(m, x) m(x)
#define FNVLP_PP_FE_2(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_1(m, __VA_ARGS__))
#define FNVLP_PP_FE_3(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_2(m, __VA_ARGS__))
#define FNVLP_PP_FE_4(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_3(m, __VA_ARGS__))
#define FNVLP_PP_FE_5(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_4(m, __VA_ARGS__))
#define FNVLP_PP_FE_6(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_5(m, __VA_ARGS__))
#define FNVLP_PP_FE_7(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_6(m, __VA_ARGS__))
#define FNVLP_PP_FE_8(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_7(m, __VA_ARGS__))
#define FNVLP_PP_FE_9(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_8(m, __VA_ARGS__))
#define FNVLP_PP_FE_10(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_9(m, __VA_ARGS__))
#define FNVLP_PP_FE_11(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_10(m, __VA_ARGS__))
#define FNVLP_PP_FE_12(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_11(m, __VA_ARGS__))
#define FNVLP_PP_FE_13(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_12(m, __VA_ARGS__))
#define FNVLP_PP_FE_14(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_13(m, __VA_ARGS__))
#define FNVLP_PP_FE_15(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_14(m, __VA_ARGS__))
#define FNVLP_PP_FE_16(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_15(m, __VA_ARGS__))
#define FNVLP_PP_FE_17(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_16(m, __VA_ARGS__))
#define FNVLP_PP_FE_18(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_17(m, __VA_ARGS__))
#define FNVLP_PP_FE_19(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_18(m, __VA_ARGS__))
#define FNVLP_PP_FE_20(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_19(m, __VA_ARGS__))
#define FNVLP_PP_FE_21(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_20(m, __VA_ARGS__))
#define FNVLP_PP_FE_22(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_21(m, __VA_ARGS__))
#define FNVLP_PP_FE_23(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_22(m, __VA_ARGS__))
#define FNVLP_PP_FE_24(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_23(m, __VA_ARGS__))
#define FNVLP_PP_FE_25(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_24(m, __VA_ARGS__))
#define FNVLP_PP_FE_26(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_25(m, __VA_ARGS__))
#define FNVLP_PP_FE_27(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_26(m, __VA_ARGS__))
#define FNVLP_PP_FE_28(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_27(m, __VA_ARGS__))
#define FNVLP_PP_FE_29(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_28(m, __VA_ARGS__))
#define FNVLP_PP_FE_30(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_29(m, __VA_ARGS__))
#define FNVLP_PP_FE_31(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_30(m, __VA_ARGS__))
#define FNVLP_PP_FE_32(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_31(m, __VA_ARGS__))
#define FNVLP_PP_FE_33(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_32(m, __VA_ARGS__))
#define FNVLP_PP_FE_34(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_33(m, __VA_ARGS__))
#define FNVLP_PP_FE_35(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_34(m, __VA_ARGS__))
#define FNVLP_PP_FE_36(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_35(m, __VA_ARGS__))
#define FNVLP_PP_FE_37(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_36(m, __VA_ARGS__))
#define FNVLP_PP_FE_38(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_37(m, __VA_ARGS__))
#define FNVLP_PP_FE_39(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_38(m, __VA_ARGS__))
#define FNVLP_PP_FE_40(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_39(m, __VA_ARGS__))
#define FNVLP_PP_FE_41(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_40(m, __VA_ARGS__))
#define FNVLP_PP_FE_42(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_41(m, __VA_ARGS__))
#define FNVLP_PP_FE_43(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_42(m, __VA_ARGS__))
#define FNVLP_PP_FE_44(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_43(m, __VA_ARGS__))
#define FNVLP_PP_FE_45(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_44(m, __VA_ARGS__))
#define FNVLP_PP_FE_46(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_45(m, __VA_ARGS__))
#define FNVLP_PP_FE_47(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_46(m, __VA_ARGS__))
#define FNVLP_PP_FE_48(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_47(m, __VA_ARGS__))
#define FNVLP_PP_FE_49(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_48(m, __VA_ARGS__))
#define FNVLP_PP_FE_50(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_49(m, __VA_ARGS__))
#define FNVLP_PP_FE_51(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_50(m, __VA_ARGS__))
#define FNVLP_PP_FE_52(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_51(m, __VA_ARGS__))
#define FNVLP_PP_FE_53(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_52(m, __VA_ARGS__))
#define FNVLP_PP_FE_54(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_53(m, __VA_ARGS__))
#define FNVLP_PP_FE_55(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_54(m, __VA_ARGS__))
#define FNVLP_PP_FE_56(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_55(m, __VA_ARGS__))
#define FNVLP_PP_FE_57(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_56(m, __VA_ARGS__))
#define FNVLP_PP_FE_58(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_57(m, __VA_ARGS__))
#define FNVLP_PP_FE_59(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_58(m, __VA_ARGS__))
#define FNVLP_PP_FE_60(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_59(m, __VA_ARGS__))
#define FNVLP_PP_FE_61(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_60(m, __VA_ARGS__))
#define FNVLP_PP_FE_62(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_61(m, __VA_ARGS__))
#define FNVLP_PP_FE_63(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_62(m, __VA_ARGS__))
#define FNVLP_PP_FE_64(m, x, ...) m(x) FNVLP_PP_EXPAND_(FNVLP_PP_FE_63(m, __VA_ARGS__))
