#pragma once
// A checkpoint as a list of registered stateful components (torchtitan's "checkpoint is a dict of
// stateful components"): the trainer, its model, optimizer and sampler, and each training method
// register a save and a load; adding a piece of state never edits the save or resume code.
#include <functional>
#include <string>
#include <vector>

namespace fnvlp::store {

struct Component {
  using SaveFn = std::function<void(const std::string& dir)>;
  // `world_size`: the rank count that wrote the checkpoint.
  using LoadFn = std::function<void(const std::string& dir, int world_size)>;
  std::string name;
  SaveFn save;  // called on every rank with the checkpoint's .tmp directory
  LoadFn load;  // called on every rank with the committed directory
  // The save is collective (save_per_pair): it runs before every local write, so a rank that
  // failed locally never skips a collective its peers are in (CheckpointManager::save).
  bool collective = false;
};

class Components {
 public:
  void add(Component c) { items_.push_back(std::move(c)); }
  // Collective components first, then the others, each group in registration order.
  void save(const std::string& dir) const {
    for (bool collective : {true, false})
      for (const auto& c : items_)
        if (c.collective == collective) c.save(dir);
  }
  void load(const std::string& dir, int world_size) const {
    for (bool collective : {true, false})
      for (const auto& c : items_)
        if (c.collective == collective) c.load(dir, world_size);
  }
  const std::vector<Component>& items() const { return items_; }

 private:
  std::vector<Component> items_;
};

}  // namespace fnvlp::store
