#include "fnvlp/core/config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

namespace fnvlp::config {

YAML::Node load(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root(YAML::NodeType::Map);
  if (!path.empty()) {
    std::ifstream in(path);
    FNVLP_CHECK(in.good(), "config: cannot open '" << path << "'");
    try {
      root = YAML::Load(in);
    } catch (const YAML::Exception& e) {
      FNVLP_FAIL("config: '" << path << "' is not valid YAML: " << e.what());
    }
    if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    FNVLP_CHECK(root.IsMap(), "config: '" << path << "' must hold a mapping at the top level");
  }
  for (const auto& o : overrides) apply_override(root, o);
  return root;
}

void apply_override(YAML::Node& root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  FNVLP_CHECK(eq != std::string::npos && eq > 0,
              "--set '" << assignment << "': expected key=value (e.g. optim.lr=1e-4)");
  const std::string key = assignment.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    FNVLP_FAIL("--set '" << assignment << "': value is not valid YAML: " << e.what());
  }
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) {
    FNVLP_CHECK(!p.empty(), "--set '" << assignment << "': empty key component");
    parts.push_back(p);
  }
  // yaml-cpp nodes are handles: walk by reassigning a handle, creating maps as needed.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node cur = chain.back();
    FNVLP_CHECK(cur.IsMap() || cur.IsNull(),
                "--set '" << assignment << "': '" << parts[i] << "' is not a mapping");
    if (!cur[parts[i]]) cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
    chain.push_back(cur[parts[i]]);
  }
  YAML::Node leaf = chain.back();
  FNVLP_CHECK(leaf.IsMap() || leaf.IsNull(),
              "--set '" << assignment << "': parent of '" << parts.back() << "' is not a mapping");
  leaf[parts.back()] = value;
}

namespace {

std::vector<std::string> split_dotted(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  return parts;
}

// The node at `parts` (undefined when a component is missing or not a mapping).
YAML::Node find(const YAML::Node& root, const std::vector<std::string>& parts) {
  std::vector<YAML::Node> chain{root};
  for (const auto& p : parts) {
    const YAML::Node cur = chain.back();
    if (!cur.IsMap() || !cur[p]) return YAML::Node(YAML::NodeType::Undefined);
    chain.push_back(cur[p]);
  }
  return chain.back();
}

void merge_into(YAML::Node dst, const YAML::Node& src) {
  for (const auto& kv : src) {
    const auto key = kv.first.as<std::string>();
    if (kv.second.IsMap() && dst[key] && dst[key].IsMap())
      merge_into(dst[key], kv.second);
    else
      dst[key] = YAML::Clone(kv.second);
  }
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

void apply_renames(YAML::Node& root, const std::vector<RenamedKey>& renames,
                   std::vector<std::string>* notes) {
  for (const auto& r : renames) {
    const auto from = split_dotted(r.from);
    YAML::Node value = find(root, from);
    if (!value.IsDefined()) continue;
    std::string to = r.to;
    // `loss.tcl: {enabled: ...}` is already the new form of a key renamed to loss.tcl.enabled.
    if (ends_with(to, ".enabled") && to.substr(0, to.size() - 8) == r.from && value.IsMap())
      continue;
    FNVLP_CHECK(!find(root, split_dotted(to)).IsDefined(),
                "config: both '" << r.from << "' (old name) and '" << to << "' are set");
    const YAML::Node moved = YAML::Clone(value);
    YAML::Node parent = from.size() == 1 ? root : find(root, {from.begin(), from.end() - 1});
    parent.remove(from.back());
    apply_override(root, to + "=" + dump(moved));
    if (notes) notes->push_back(std::string("config: '") + r.from + "' is now '" + to + "'");
  }
}

YAML::Node load_layers(const std::vector<std::string>& paths,
                       const std::vector<std::string>& overrides,
                       const std::vector<RenamedKey>& renames, std::vector<std::string>* notes) {
  YAML::Node root(YAML::NodeType::Map);
  for (const auto& path : paths) {
    YAML::Node layer = load(path);
    apply_renames(layer, renames, notes);
    merge_into(root, layer);
  }
  for (const auto& o : overrides) {
    YAML::Node layer(YAML::NodeType::Map);
    apply_override(layer, o);
    apply_renames(layer, renames, notes);
    merge_into(root, layer);
  }
  return root;
}

void Reader::finish() const {
  if (!node_ || !node_.IsMap()) return;
  std::vector<std::string> unknown;
  for (const auto& kv : node_) {
    const auto k = kv.first.as<std::string>();
    if (std::find(used_.begin(), used_.end(), k) == used_.end())
      unknown.push_back(path_.empty() ? k : path_ + "." + k);
  }
  if (!unknown.empty()) {
    std::string known;
    for (const auto& u : used_) known += (known.empty() ? "" : ", ") + u;
    std::string list;
    for (const auto& u : unknown) list += (list.empty() ? "" : ", ") + u;
    FNVLP_FAIL("config: unknown key(s) " << list << " (known at this level: " << known << ")");
  }
}

std::string describe(const Bounds& b) {
  std::ostringstream o;
  auto bound = [&](double v) {
    if (std::isinf(v))
      o << (v < 0 ? "-inf" : "inf");
    else
      o << v;
  };
  o << (b.lo_open || std::isinf(b.lo) ? "(" : "[");
  bound(b.lo);
  o << ", ";
  bound(b.hi);
  o << (b.hi_open || std::isinf(b.hi) ? ")" : "]");
  return o.str();
}

std::string dump(const YAML::Node& node) {
  YAML::Emitter out;
  out << node;
  return std::string(out.c_str()) + "\n";
}

}  // namespace fnvlp::config
