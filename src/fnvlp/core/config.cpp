#include "fnvlp/core/config.hpp"

#include <algorithm>
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

std::string dump(const YAML::Node& node) {
  YAML::Emitter out;
  out << node;
  return std::string(out.c_str()) + "\n";
}

}  // namespace fnvlp::config
