#pragma once
// Typed configuration ("config as code"): a config is a plain struct that lists its fields once
// (core/config_fields.hpp),
//
//   struct OptimConfig {
//     FNVLP_CONFIG_FIELDS(
//         (double, lr, 1e-4),
//         (int64_t, warmup_steps, 0))
//   };
//
// and that list drives YAML loading (with type errors and unknown keys reported by their dotted
// path), `--set a.b=value` overrides and the dump of the resolved config. A hand-written
// `template <class V> void fields(V& v)` works the same (a section that extends another).
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "fnvlp/core/config_fields.hpp"
#include "fnvlp/core/error.hpp"

namespace fnvlp::config {

// Loads `path` (empty: start from an empty map) and applies "dotted.key=yaml-value" overrides in
// order. A value is parsed as YAML, so `--set lrs=[1,2]` gives a list.
YAML::Node load(const std::string& path, const std::vector<std::string>& overrides = {});
void apply_override(YAML::Node& root, const std::string& assignment);

namespace detail {
template <typename T, typename = void>
struct has_fields : std::false_type {};
template <typename T>
struct has_fields<T, std::void_t<decltype(std::declval<T&>().fields(std::declval<int&>()))>>
    : std::true_type {};
template <typename T, typename = void>
struct has_renamed_keys : std::false_type {};
template <typename T>
struct has_renamed_keys<T, std::void_t<decltype(T::renamed_keys())>> : std::true_type {};
}  // namespace detail

// An enum field is read and written by name: the enum's namespace declares
//   const std::vector<std::pair<E, const char*>>& enum_names(E);
// and a value outside the names is a load error listing them.
template <typename E>
E enum_from_name(const std::string& name, const std::string& path) {
  std::string choices;
  for (const auto& [value, n] : enum_names(E{})) {
    if (name == n) return value;
    choices += choices.empty() ? n : std::string(" | ") + n;
  }
  FNVLP_FAIL("config: '" << path << "' has value '" << name << "' (expected " << choices << ")");
}
template <typename E>
const char* enum_to_name(E value) {
  for (const auto& [v, n] : enum_names(E{}))
    if (v == value) return n;
  FNVLP_FAIL("config: enum value " << static_cast<int>(value) << " has no name");
}

// A key that moved: `from` (dotted) is read as `to`. Old run directories' config.yaml files and
// old --set overrides keep loading; each rename applied is reported through `notes`.
struct RenamedKey {
  const char* from;
  const char* to;
};
// Moves every `from` present in `root` to `to`; a scalar found where `to` ends in ".enabled"
// keeps its meaning (`loss.tcl: true` -> `loss.tcl.enabled: true`). Both present: error naming
// the two keys.
void apply_renames(YAML::Node& root, const std::vector<RenamedKey>& renames,
                   std::vector<std::string>* notes = nullptr);

std::string describe(const Bounds& b);  // "[1, inf)", "(0, 1)"

// A numeric value outside `bounds` is an error naming the key, the value and the range.
template <typename T>
void check_bounds(const std::string& path, const T& value, const Bounds& bounds) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    FNVLP_CHECK(bounds.contains(static_cast<double>(value)),
                "config: '" << path << "' = " << value << " is outside " << describe(bounds));
  }
}

// Checks every bounded field of a config built in code (tests, fine-tuning's derived config)
// as loading checks a file's: `check(cfg)` throws naming the first field out of range.
class Checker {
 public:
  explicit Checker(std::string path) : path_(std::move(path)) {}
  template <typename T>
  void operator()(const char* key, const T& value, const Bounds& bounds = {}) {
    const std::string path = path_.empty() ? key : path_ + "." + key;
    if constexpr (detail::has_fields<T>::value) {
      Checker sub(path);
      const_cast<T&>(value).fields(sub);
    } else {
      check_bounds(path, value, bounds);
    }
  }

 private:
  std::string path_;
};

template <typename T>
void check(const T& cfg) {
  Checker c("");
  const_cast<T&>(cfg).fields(c);
}

class Reader {
 public:
  Reader(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {
    FNVLP_CHECK(!node_ || node_.IsMap() || node_.IsNull(),
                "config: '" << display_path() << "' must be a mapping");
  }

  template <typename T>
  void operator()(const char* key, T& out, const Bounds& bounds = {}) {
    used_.emplace_back(key);
    if (!node_ || !node_.IsMap() || !node_[key]) return;  // absent: keep the default
    const YAML::Node value = node_[key];
    const std::string path = path_.empty() ? key : path_ + "." + key;
    read(value, path, out);
    check_bounds(path, out, bounds);
  }

  // Unknown keys are errors: a typo in a config must not silently run the default.
  void finish() const;

 private:
  template <typename T>
  void read(const YAML::Node& value, const std::string& path, T& out) {
    if constexpr (detail::has_fields<T>::value) {
      Reader sub(value, path);
      out.fields(sub);
      sub.finish();
    } else if constexpr (std::is_enum_v<T>) {
      std::string name;
      try {
        name = value.as<std::string>();
      } catch (const YAML::Exception&) {
        FNVLP_FAIL("config: '" << path << "' has value '" << YAML::Dump(value)
                               << "' that is not a name");
      }
      out = enum_from_name<T>(name, path);
    } else {
      try {
        out = value.as<T>();
      } catch (const YAML::Exception&) {
        FNVLP_FAIL("config: '" << path << "' has value '" << YAML::Dump(value)
                               << "' that is not a valid " << type_name<T>());
      }
    }
  }
  template <typename T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, bool>)
      return "boolean";
    else if constexpr (std::is_integral_v<T>)
      return "integer";
    else if constexpr (std::is_floating_point_v<T>)
      return "number";
    else if constexpr (std::is_same_v<T, std::string>)
      return "string";
    else
      return "value of the expected type";
  }
  std::string display_path() const { return path_.empty() ? "<root>" : path_; }

  YAML::Node node_;
  std::string path_;
  std::vector<std::string> used_;
};

class Writer {
 public:
  explicit Writer(YAML::Node& node) : node_(node) {}
  template <typename T>
  void operator()(const char* key, const T& value, const Bounds& = {}) {
    if constexpr (detail::has_fields<T>::value) {
      YAML::Node sub(YAML::NodeType::Map);
      Writer w(sub);
      const_cast<T&>(value).fields(w);
      node_[key] = sub;
    } else if constexpr (std::is_enum_v<T>) {
      node_[key] = enum_to_name(value);
    } else {
      node_[key] = value;
    }
  }

 private:
  YAML::Node& node_;
};

// Fills `out` from `node`; errors name the dotted path of the offending key.
template <typename T>
void from_yaml(const YAML::Node& node, T& out) {
  Reader r(node, "");
  out.fields(r);
  r.finish();
}

template <typename T>
YAML::Node to_yaml(const T& cfg) {
  YAML::Node node(YAML::NodeType::Map);
  Writer w(node);
  const_cast<T&>(cfg).fields(w);
  return node;
}

// Convenience for mains: file + overrides -> typed struct.
// Loads several files, each a layer over the previous one (mappings merge key by key, any other
// value replaces): `--config base.yaml --config methods/glofnd.yaml`; then the overrides. The
// renames apply to each file and each override key before they are merged.
YAML::Node load_layers(const std::vector<std::string>& paths,
                       const std::vector<std::string>& overrides = {},
                       const std::vector<RenamedKey>& renames = {},
                       std::vector<std::string>* notes = nullptr);

// Convenience for mains: files (layered) + overrides -> typed struct, with T::renamed_keys()
// applied when T declares them.
template <typename T>
T load_typed(const std::vector<std::string>& paths, const std::vector<std::string>& overrides,
             std::vector<std::string>* notes = nullptr) {
  std::vector<RenamedKey> renames;
  if constexpr (detail::has_renamed_keys<T>::value) renames = T::renamed_keys();
  const YAML::Node root = load_layers(paths, overrides, renames, notes);
  T cfg;
  from_yaml(root, cfg);
  check(cfg);  // the defaults too
  return cfg;
}
template <typename T>
T load_typed(const std::string& path, const std::vector<std::string>& overrides,
             std::vector<std::string>* notes = nullptr) {
  return load_typed<T>(std::vector<std::string>{path}, overrides, notes);
}

std::string dump(const YAML::Node& node);

}  // namespace fnvlp::config
