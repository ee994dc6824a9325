#pragma once
// Typed configuration ("config as code"): a config is a plain struct that lists its fields once,
//
//   struct OptimConfig {
//     double lr = 1e-4;
//     int64_t warmup_steps = 0;
//     template <class V> void fields(V& v) { v("lr", lr); v("warmup_steps", warmup_steps); }
//   };
//
// and the same list drives YAML loading (with type errors and unknown keys reported by their
// dotted path), `--set a.b=value` overrides and the dump of the resolved config.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

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
}  // namespace detail

class Reader {
 public:
  Reader(const YAML::Node& node, std::string path) : node_(node), path_(std::move(path)) {
    FNVLP_CHECK(!node_ || node_.IsMap() || node_.IsNull(),
                "config: '" << display_path() << "' must be a mapping");
  }

  template <typename T>
  void operator()(const char* key, T& out) {
    used_.emplace_back(key);
    if (!node_ || !node_.IsMap() || !node_[key]) return;  // absent: keep the default
    const YAML::Node value = node_[key];
    const std::string path = path_.empty() ? key : path_ + "." + key;
    if constexpr (detail::has_fields<T>::value) {
      Reader sub(value, path);
      out.fields(sub);
      sub.finish();
    } else {
      try {
        out = value.as<T>();
      } catch (const YAML::Exception&) {
        FNVLP_FAIL("config: '" << path << "' has value '" << YAML::Dump(value)
                               << "' that is not a valid " << type_name<T>());
      }
    }
  }

  // Unknown keys are errors: a typo in a config must not silently run the default.
  void finish() const;

 private:
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
  void operator()(const char* key, const T& value) {
    if constexpr (detail::has_fields<T>::value) {
      YAML::Node sub(YAML::NodeType::Map);
      Writer w(sub);
      const_cast<T&>(value).fields(w);
      node_[key] = sub;
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
template <typename T>
T load_typed(const std::string& path, const std::vector<std::string>& overrides) {
  T cfg;
  from_yaml(load(path, overrides), cfg);
  return cfg;
}

std::string dump(const YAML::Node& node);

}  // namespace fnvlp::config
