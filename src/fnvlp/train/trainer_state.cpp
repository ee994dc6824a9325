// The pretraining loop's epoch ends, embedding exports, checkpoints and resume.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <optional>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/core/config.hpp"
#include "fnvlp/core/fault.hpp"
#include "fnvlp/core/sha256.hpp"
#include "fnvlp/store/pretrained.hpp"
#include "fnvlp/train/embed_export.hpp"
#include "fnvlp/train/fused_adamw.hpp"
#include "fnvlp/train/signals.hpp"
#include "fnvlp/train/trainer_impl.hpp"

namespace fnvlp::train {

namespace fs = std::filesystem;
using json = nlohmann::json;
using negatives::Method;

namespace {

// The training data's identity, saved with the loop state: the shards' contents by their
// checksums (not the directory: a copy of the same shards elsewhere is the same data), the pair
// count, which is the pair_id space, and the vocabulary.
json data_identity(const data::Manifest& m, const std::string& dir) {
  Sha256 h;
  for (const auto& s : m.shards) {
    const std::string line = s.file + " " + std::to_string(s.first_pair_id) + " " +
                             std::to_string(s.num_pairs) + " " + s.sha256 + "\n";
    h.update(line.data(), line.size());
  }
  std::error_code ec;
  const fs::path abs = fs::absolute(dir, ec);
  return {{"dir", ec ? dir : abs.lexically_normal().string()},
          {"manifest_digest", h.hex()},
          {"num_pairs", m.num_pairs},
          {"vocab_sha256", m.vocab_sha256}};
}

// The checkpoint's data identity when --data holds other data ("differs" names the first field
// that differs), else null. Checkpoints written before the identity was saved count as the same.
json other_data(const std::string& checkpoint, const json& now) {
  const json state = json::parse(read_file((fs::path(checkpoint) / "trainer.json").string()));
  if (!state.contains("data")) return nullptr;
  json then = state.at("data");
  for (const char* key : {"manifest_digest", "num_pairs", "vocab_sha256"})
    if (then.value(key, json()) != now.at(key)) {
      then["differs"] = key;
      return then;
    }
  return nullptr;
}

std::string describe_data(const json& d) {
  return d.value("dir", std::string("?")) + " (manifest digest " +
         d.value("manifest_digest", std::string("?")) + ", " + d.value("num_pairs", json()).dump() +
         " pairs, vocabulary " + d.value("vocab_sha256", std::string("?")) + ")";
}

// Every per-pair state (GloFND's λ, the samplers' records, the epoch's order of pair_ids) would
// land on other pairs: refused on every rank (each reads the same files) before anything loads.
void refuse_other_data(const std::string& checkpoint, const json& then, const json& now) {
  throw UsageError("--resume: the checkpoint " + checkpoint + " was written on the data in " +
                   describe_data(then) + "; --data holds other data: " + describe_data(now) + ", " +
                   then.at("differs").get<std::string>() +
                   " differs. Its per-pair state (the methods' per-anchor state, the sampler's "
                   "epoch) would apply to other pairs: resume with the checkpoint's --data, "
                   "start a new run in another --out, or keep the model, optimizer and step "
                   "and start every per-pair state afresh with --resume-data changed");
}

// The model the checkpoint holds against the one configured now: a field that shapes the
// parameters or the computation on them (widths, depths, heads, sizes) is refused on every rank,
// naming each, before libtorch's load would fail on a missing or mis-shaped tensor. Dropout and
// the temperature's initial value and clamps may change.
void refuse_other_model(const std::string& checkpoint, const model::ModelConfig& now) {
  const YAML::Node then = config::to_yaml(store::checkpoint_model_config(checkpoint));
  const YAML::Node want = config::to_yaml(now);
  const auto show = [](const YAML::Node& n) {
    std::string t = config::dump(n);
    while (!t.empty() && t.back() == '\n') t.pop_back();
    return t;
  };
  std::string diff;
  for (const auto& kv : want) {
    const std::string key = kv.first.as<std::string>();
    if (key == "dropout" || key.rfind("temp", 0) == 0) continue;
    const std::string a = then[key] ? show(then[key]) : "(absent)";
    const std::string b = show(kv.second);
    if (a != b) diff += (diff.empty() ? "" : ", ") + ("model." + key + " " + a + " -> " + b);
  }
  if (!diff.empty())
    throw UsageError("--resume: the checkpoint " + checkpoint +
                     " holds another model than the config asks for (checkpoint -> now: " + diff +
                     "); resume with the run's own model settings (its config.yaml), or start a "
                     "new run in another --out (fnvlp-finetune --init takes weights into a new "
                     "run of the same model)");
}

// A resumed run's settings against those of the run that wrote its checkpoint (RUN/config.yaml
// of the checkpoint's run, rewritten only once a launch is past its resume), key by key, in three
// classes (ARCHITECTURE.md, "Elastic resume"):
//   refused: what lays out the checkpoint's state or gives it its meaning: the method
//     (negatives.method), the soft targets and their queue (loss.soft_targets, loss.queue_size),
//     the sampler and its embeddings (sampler.kind, sampler.embeddings); the model's fields are
//     refuse_other_model's;
//   free: how the run is driven and observed: logging, checkpoints, the watchdog, threads and
//     prefetch, the step budget (train.max_steps, train.epochs), profiling, data verification,
//     the communication backend, fault injection;
//   noted (one log line, old -> new): everything else (the learning rate and its schedule, the
//     batch size, the loss weights, a method's parameters, the device and precision, ...), whose
//     meaning from the resumed step on is the new value's.
enum class ResumeChange { kFree, kNoted, kRefused };

ResumeChange resume_change(const std::string& key) {
  const auto starts = [&](const char* prefix) { return key.rfind(prefix, 0) == 0; };
  for (const char* k : {"negatives.method", "loss.soft_targets", "loss.queue_size", "sampler.kind",
                        "sampler.embeddings"})
    if (key == k) return ResumeChange::kRefused;
  for (const char* k : {"train.log_every", "train.max_steps", "train.epochs", "train.threads",
                        "train.prefetch", "train.export_batch", "data.verify"})
    if (key == k) return ResumeChange::kFree;
  for (const char* p : {"checkpoint.", "watchdog.", "fault.", "comm.", "train.profile_"})
    if (starts(p)) return ResumeChange::kFree;
  if (starts("model.") && key != "model.dropout" && key.rfind("model.temp", 0) != 0)
    return ResumeChange::kFree;  // refuse_other_model's, from the checkpoint's own model.yaml
  return ResumeChange::kNoted;
}

void flatten(const YAML::Node& node, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node)
      flatten(kv.second, prefix + (prefix.empty() ? "" : ".") + kv.first.as<std::string>(), out);
    return;
  }
  std::string v = config::dump(node);
  while (!v.empty() && v.back() == '\n') v.pop_back();
  out[prefix] = v;
}

// Refuses (exit 2 on every rank, each reads the same files) or logs (root) what changed.
void check_resume_settings(const Comm& comm, const std::string& checkpoint,
                           const std::string& config_yaml) {
  const fs::path then_path =
      fs::path(store::resolve_checkpoint_dir(checkpoint)).parent_path().parent_path() /
      "config.yaml";
  if (!fs::exists(then_path)) return;  // a checkpoint copied out of its run: nothing to compare
  std::map<std::string, std::string> then, now;
  flatten(config::load(then_path.string()), "", then);
  flatten(YAML::Load(config_yaml), "", now);
  std::string refused, noted;
  for (const auto& [key, value] : now) {
    const auto it = then.find(key);
    // A key the writing version did not have (or had under another name) is not compared.
    if (it == then.end() || it->second == value) continue;
    const std::string change = key + " " + it->second + " -> " + value;
    switch (resume_change(key)) {
      case ResumeChange::kRefused:
        refused += (refused.empty() ? "" : ", ") + change;
        break;
      case ResumeChange::kNoted:
        noted += (noted.empty() ? "" : ", ") + change;
        break;
      case ResumeChange::kFree:
        break;
    }
  }
  if (!refused.empty())
    throw UsageError("--resume: the checkpoint " + checkpoint + " was written with other " +
                     "settings that its state depends on (" + then_path.string() +
                     " -> now: " + refused + "); resume with the run's own values, or start a " +
                     "new run in another --out");
  if (!noted.empty() && comm.is_root())
    spdlog::info("pretrain: the resume changes {} (from the resumed step on)", noted);
}

}  // namespace

void Trainer::finish_epoch(Watchdog& dog, MetricsWriter& metrics) {
  if (static_.on) flush_static_losses();  // the cached embeddings of the epoch's last steps
  data::Embeddings exported;              // this rank's block of the export, if there is one
  if (cfg_.train.export_embeddings) {
    exported = export_embeddings(dog, metrics);
    for (auto& m : methods_)
      if (m->wants_epoch_export(epoch_ + 1)) {
        auto guard =
            dog.long_phase(m->name() + " at the epoch export", cfg_.watchdog.long_phase_timeout_s);
        m->epoch_exported(epoch_ + 1, run_.embeddings_path(epoch_));
      }
  }
  validate_retrieval(dog, metrics);
  if (cache_.enabled()) {  // the next epoch groups by the training passes' embeddings
    auto guard = dog.long_phase("cached embeddings", cfg_.watchdog.long_phase_timeout_s);
    const data::Embeddings snap = cached_snapshot();
    write_embeddings_collective(comm_, run_.cached_embeddings_path(epoch_), snap,
                                data_.train.num_pairs());
    for (auto& m : methods_) m->set_epoch_embeddings(epoch_ + 1, cache_.image(), cache_.text());
  } else if (methods_.wants_epoch_embeddings()) {  // ... or by this epoch's export
    const auto [img, txt] = embedding_tensors(exported);
    for (auto& m : methods_) m->set_epoch_embeddings(epoch_ + 1, img, txt);
  }
  call_epoch_hook(dog, metrics);
}

// The cache as this rank's block of an export; pairs no step has embedded yet are embedded now.
data::Embeddings Trainer::cached_snapshot() {
  const data::PairRange block = data_.block();
  const std::vector<int64_t> unseen = cache_.unseen();
  comm_.collective([&] {
    if (unseen.empty()) return;
    const data::Embeddings e =
        embed_pairs(model_, data_.augment, data_.train, unseen, cfg_.train.export_batch);
    cache_.fill(unseen, e.image_emb, e.text_emb);
  });
  const int64_t embedded = comm_.allreduce_sum(static_cast<int64_t>(unseen.size()));
  if (comm_.is_root())
    spdlog::info(
        "pretrain: epoch {} grouped by the training passes' embeddings ({} of {} pairs "
        "never in a step, embedded now)",
        epoch_ + 1, embedded, data_.train.num_pairs());
  data::Embeddings snap;
  snap.epoch = epoch_;
  snap.step = step_;
  snap.dim = cfg_.model.embed_dim;
  snap.first = block.begin;
  const auto* img = cache_.image().data_ptr<float>();
  const auto* txt = cache_.text().data_ptr<float>();
  snap.image_emb.assign(img, img + cache_.image().numel());
  snap.text_emb.assign(txt, txt + cache_.text().numel());
  for (int64_t p = block.begin; p < block.end; ++p) snap.pair_id.push_back(p);
  comm_.collective([&] { data_.train.ids(snap.pair_id, &snap.image_id, &snap.label); });
  return snap;
}

// --resume-data changed: the model, optimizer and counters are the checkpoint's; the per-pair
// state its components skipped (the sampler's epoch, the epoch cache, what each method's
// load_on_changed_data leaves) is as constructed for the new data, which starts a new epoch (the
// next one when the checkpoint was inside an epoch).
void Trainer::start_on_changed_data() {
  std::vector<std::string> reset = {"the sampler's epoch"};
  if (cache_.enabled()) reset.push_back("the epoch cache of embeddings");
  for (const auto& m : methods_)
    if (!m->per_pair_state().empty()) reset.push_back(m->per_pair_state());
  if (loop_step_in_epoch_ > 0) ++epoch_;
  step_in_epoch_ = 0;
  resume_in_epoch_ = false;
  resplit_from_ = 0;
  sampler_state_ = nullptr;
  old_grouped_states_.clear();
  data_change_["step"] = step_;
  data_change_["epoch"] = epoch_;
  data_change_["reset"] = reset;
  if (!comm_.is_root()) return;
  std::string what;
  for (const auto& r : reset) what += (what.empty() ? "" : ", ") + r;
  spdlog::warn(
      "pretrain: --resume-data changed: the checkpoint {} was written on {}; --data holds {} "
      "({} differs). Kept: the model, the optimizer and step {}; started afresh: {}; epoch {} "
      "begins on the new data",
      data_change_.at("checkpoint").get<std::string>(), describe_data(data_change_.at("from")),
      describe_data(data_change_.at("to")), data_change_["from"].at("differs").get<std::string>(),
      step_, what, epoch_);
}

// A resumed grouped epoch E uses the embeddings exported (or cached) at the end of epoch E - 1.
void Trainer::restore_epoch_embeddings() {
  if (!methods_.wants_epoch_embeddings()) return;
  if (!data_change_.is_null()) {
    // The last epoch's embeddings are the old data's: the new data's at the current weights.
    const data::Embeddings e = embed_training_set();
    const auto [img, txt] = embedding_tensors(e);
    for (auto& m : methods_) m->set_epoch_embeddings(epoch_, img, txt);
    if (comm_.is_root())
      spdlog::info("pretrain: epoch {} samples by the new data's embeddings at step {}", epoch_,
                   step_);
    return;
  }
  const std::string path =
      cache_.enabled() ? run_.cached_embeddings_path(epoch_ - 1) : run_.embeddings_path(epoch_ - 1);
  FNVLP_CHECK(fs::exists(path), path << ": missing; the grouped sampler of epoch " << epoch_
                                     << " needs the embeddings of epoch " << epoch_ - 1);
  const data::PairRange block = data_.block();
  int64_t rows = 0;
  data::Embeddings e;
  comm_.collective([&] { e = data::read_embedding_rows(path, block.begin, 0, &rows); });
  FNVLP_CHECK(rows == data_.train.num_pairs(),
              path << ": " << rows << " rows, the dataset has " << data_.train.num_pairs());
  comm_.collective([&] { e = data::read_embedding_rows(path, block.begin, block.size()); });
  const auto [img, txt] = embedding_tensors(e);
  for (auto& m : methods_) m->set_epoch_embeddings(epoch_, img, txt);
}

void Trainer::call_epoch_hook(Watchdog& dog, MetricsWriter& metrics) {
  if (!opt_.on_epoch_end) return;
  auto guard = dog.long_phase("epoch-end hook", cfg_.watchdog.long_phase_timeout_s);
  json rec = opt_.on_epoch_end(*model_, epoch_, step_);
  model_->train();
  if (rec.is_object() && !rec.empty()) {
    rec["step"] = step_;
    rec["epoch"] = epoch_;
    metrics.write(rec);
  }
}

// This rank's block of the export with what the methods add (GloFND's λ): the analysis job reads
// the file all ranks write.
data::Embeddings Trainer::embed_training_set() {
  data::Embeddings e;
  comm_.collective([&] {
    e = embed_dataset(comm_, model_, data_.augment, data_.train, cfg_.train.export_batch, epoch_,
                      step_);
  });
  for (auto& m : methods_) m->export_embeddings(e);
  return e;
}

// SIGUSR2 (agree_export): embeddings/step-SSSSSSS.h5 of the current weights, then training goes
// on. The samplers' embeddings stay those of the epoch end and no RNG stream is consumed, so the
// run's trajectory is unchanged.
void Trainer::export_on_demand(Watchdog& dog) {
  auto guard = dog.long_phase("export embeddings", cfg_.watchdog.long_phase_timeout_s);
  fault::point("export.sleep", epoch_);
  const data::Embeddings e = embed_training_set();
  const std::string path = fmt::format("{}/step-{:07d}.h5", run_.embeddings_dir(), step_);
  write_embeddings_collective(comm_, path, e, data_.train.num_pairs());
  if (comm_.is_root())
    spdlog::info("pretrain: embeddings of {} pairs at step {} -> {} (requested by SIGUSR2)",
                 data_.train.num_pairs(), step_, path);
}

data::Embeddings Trainer::export_embeddings(Watchdog& dog, MetricsWriter& metrics) {
  auto guard = dog.long_phase("export embeddings", cfg_.watchdog.long_phase_timeout_s);
  fault::point("export.sleep", epoch_);
  data::Embeddings e = embed_training_set();
  write_embeddings_collective(comm_, run_.embeddings_path(epoch_), e, data_.train.num_pairs());
  last_exported_epoch_ = epoch_;
  return e;
}

void Trainer::validate_retrieval(Watchdog& dog, MetricsWriter& metrics) {
  if (!data_.val || last_validated_epoch_ >= epoch_) return;
  auto guard = dog.long_phase("validation", cfg_.watchdog.long_phase_timeout_s);
  const std::string val_path =
      run_.embeddings_dir() + "/val-" + fs::path(run_.embeddings_path(epoch_)).filename().string();
  metrics.write(zero_shot_validation(comm_, model_, data_.augment, *data_.val,
                                     cfg_.train.export_batch, epoch_, step_, val_path));
  last_validated_epoch_ = epoch_;
}

// The checkpoint's pieces: each method's state (collective ones first), this rank's sampler
// cursor, and on rank 0 the model, its architecture, the optimizer and the loop's counters.
void Trainer::register_components() {
  for (auto& m : methods_) {
    Method* mp = m.get();
    components_.add({mp->name(), [mp](const std::string& d) { mp->save(d); },
                     [this, mp](const std::string& d, int ws) {
                       if (data_change_.is_null())
                         mp->load(d, ws);
                       else
                         mp->load_on_changed_data(d, ws);
                     },
                     mp->collective_save()});
  }
  if (cache_.enabled())
    components_.add(
        {"epoch_cache",
         [this](const std::string& d) { cache_.save(d, comm_, data_.train.num_pairs()); },
         [this](const std::string& d, int) {
           if (data_change_.is_null()) cache_.load(d, comm_);
         },
         true});
  components_.add({"sampler",
                   [this](const std::string& d) {
                     write_file((fs::path(d) / rank_file("sampler", comm_.rank())).string(),
                                sampler_state_.dump());
                   },
                   [this](const std::string& d, int ws) {
                     if (data_change_.is_null()) load_sampler_state(d, ws);
                   }});
  components_.add({"model", root_only([this](const std::string& d) {
                     save_module(d, "model", *model_);
                     write_model_config(d, cfg_.model);  // fnvlp-eval / --init read it
                   }),
                   [this](const std::string& d, int) { load_module(d, "model", *model_); }});
  components_.add(
      {"optimizer",
       root_only([this](const std::string& d) { save_optimizer(d, "optimizer", *optim_.adamw); }),
       [this](const std::string& d, int) { load_optimizer(d, "optimizer", *optim_.adamw); }});
  components_.add({"trainer", root_only([this](const std::string& d) { save_loop_state(d); }),
                   [this](const std::string& d, int) { load_loop_state(d); }});
}

Component::SaveFn Trainer::root_only(Component::SaveFn fn) {
  return [this, fn](const std::string& d) {
    if (comm_.is_root()) fn(d);
  };
}

void Trainer::save_loop_state(const std::string& dir) {
  const json state = {{"step", step_},
                      {"epoch", epoch_},
                      {"step_in_epoch", step_in_epoch_},
                      {"world_size", comm_.size()},
                      {"samples_seen", samples_seen_},
                      {"schedule_ranks", schedule_ranks_},
                      {"schedule_batch_size", schedule_batch_},
                      {"skipped_steps", skips_.total()},
                      {"last_exported_epoch", last_exported_epoch_},
                      {"last_validated_epoch", last_validated_epoch_},
                      {"data", data_identity(data_.train.manifest(), opt_.data_dir)}};
  write_file((fs::path(dir) / "trainer.json").string(), state.dump(2));
}

void Trainer::load_loop_state(const std::string& dir) {
  const json state = json::parse(read_file((fs::path(dir) / "trainer.json").string()));
  step_ = state.at("step").get<int64_t>();
  epoch_ = state.at("epoch").get<int64_t>();
  last_exported_epoch_ = state.value("last_exported_epoch", int64_t{-1});
  // Checkpoints from before validation had its own record were validated where they exported.
  last_validated_epoch_ = state.value("last_validated_epoch", last_exported_epoch_);
  loop_step_in_epoch_ = state.at("step_in_epoch").get<int64_t>();
  skips_.set_total(state.value("skipped_steps", int64_t{0}));
  // Checkpoints from before the samples count: every step so far at the checkpoint's rank count
  // and this run's batch size.
  const int ranks = state.at("world_size").get<int>();
  samples_seen_ = state.value("samples_seen", step_ * cfg_.train.batch_size * ranks);
  schedule_ranks_ = state.value("schedule_ranks", ranks);
  schedule_batch_ = state.value("schedule_batch_size", cfg_.train.batch_size);
  FNVLP_CHECK(samples_seen_ >= 0 && schedule_ranks_ >= 1 && schedule_batch_ >= 1,
              dir << "/trainer.json: malformed schedule (samples_seen " << samples_seen_
                  << ", schedule_ranks " << schedule_ranks_ << ", schedule_batch_size "
                  << schedule_batch_ << ")");
  schedule_steps_ = planned_steps(schedule_ranks_, schedule_batch_);
}

int64_t Trainer::planned_steps(int ranks, int64_t batch) const {
  if (cfg_.train.max_steps > 0) return cfg_.train.max_steps;
  const int64_t n = data::BlockPartition(data_.train.num_pairs(), ranks).min_block_size();
  const int64_t uniform = n / batch;
  const int64_t grouped = methods_.grouped ? negatives::grouped_batches(
                                                 n, methods_.grouped->config().search_space, batch)
                                           : uniform;
  return uniform + (cfg_.train.epochs - 1) * grouped;
}

int64_t Trainer::last_step() const {
  if (cfg_.train.max_steps > 0) {
    const int64_t global = cfg_.train.batch_size * comm_.size();
    const int64_t left = std::max<int64_t>(
        0, cfg_.train.max_steps * schedule_ranks_ * schedule_batch_ - samples_seen_);
    return step_ + (left + global - 1) / global;
  }
  if (epoch_ >= cfg_.train.epochs) return step_;
  return step_ + (epoch_steps(epoch_) - step_in_epoch_) +
         (cfg_.train.epochs - 1 - epoch_) * methods_.grouped_steps;
}

// This rank's cursor; from a checkpoint of another rank count or batch size, rank 0's (a uniform
// state is the same on every rank), re-split by continue_on_new_ranks.
void Trainer::load_sampler_state(const std::string& dir, int world_size) {
  const auto mine = fs::path(dir) / rank_file("sampler", comm_.rank());
  const auto file = world_size == comm_.size() ? mine : fs::path(dir) / rank_file("sampler", 0);
  if (world_size != comm_.size()) resplit_from_ = world_size;
  if (!fs::exists(file)) return;
  sampler_state_ = json::parse(read_file(file.string()));
  if (sampler_state_.value("batch_size", cfg_.train.batch_size) != cfg_.train.batch_size)
    resplit_from_ = world_size;
  resume_in_epoch_ = resplit_from_ == 0;
  // A grouped epoch is re-split from every old rank's cursor (a few numbers and a bitmask each).
  if (resplit_from_ > 0 && sampler_state_.value("grouped", false))
    for (int r = 0; r < world_size; ++r)
      old_grouped_states_.push_back(
          json::parse(read_file((fs::path(dir) / rank_file("sampler", r)).string())));
}

void Trainer::continue_on_new_ranks() {
  const int from = resplit_from_;
  if (sampler_state_.is_null() || sampler_state_.value("epoch", int64_t{-1}) != epoch_) {
    if (comm_.is_root())
      spdlog::warn(
          "pretrain: the checkpoint of {} ranks holds no sampler state of epoch {}: the "
          "epoch restarts",
          from, epoch_);
    sampler_state_ = nullptr;
    step_in_epoch_ = 0;
    return;
  }
  if (sampler_state_.value("grouped", false)) {
    if (sampler_state_.contains("resplit")) {
      // A second change of rank count within one grouped epoch: its cursors are those of the
      // re-split segment, which resplit() does not take.
      if (comm_.is_root())
        spdlog::warn(
            "pretrain: the checkpoint of {} ranks stopped {} steps into grouped epoch {}, "
            "itself re-split from another rank count: epoch {} restarts on {} ranks and the "
            "pairs of its first {} steps are drawn again",
            from, loop_step_in_epoch_, epoch_, epoch_, comm_.size(), loop_step_in_epoch_);
      sampler_state_ = nullptr;
      step_in_epoch_ = 0;
      return;
    }
    FNVLP_CHECK(methods_.grouped != nullptr,
                "pretrain: the checkpoint holds a grouped sampler state and "
                "this run's sampler does not group");
    methods_.grouped->resplit(old_grouped_states_);
    old_grouped_states_.clear();
  } else {
    methods_.sampler->load_state(sampler_state_);
  }
  sampler_state_ = methods_.sampler->state();
  const int64_t left = methods_.uniform ? methods_.uniform->batches_remaining()
                                        : methods_.grouped->batches_remaining();
  FNVLP_CHECK(left >= 0 && left <= epoch_steps(epoch_),
              "pretrain: the sampler state of "
                  << from << " ranks leaves " << left << " batches of epoch " << epoch_ << " on "
                  << comm_.size() << " ranks, whose epoch has " << epoch_steps(epoch_));
  step_in_epoch_ = epoch_steps(epoch_) - left;
  if (comm_.is_root())
    spdlog::info(
        "pretrain: the checkpoint of {} ranks ({} steps into epoch {}) continues on {} ranks: "
        "the pairs the epoch has not drawn yet, split over the new blocks, give {} more steps; "
        "no pair is drawn twice",
        from, loop_step_in_epoch_, epoch_, comm_.size(), left);
}

void Trainer::save_checkpoint(Watchdog& dog) {
  auto guard = dog.long_phase("checkpoint", cfg_.checkpoint.save_timeout_s);
  if (static_.on) {  // the skip count and AdamW's step counts are the device's until here
    flush_static_losses();
    if (optim_.flagged) optim_.flagged->sync_host_steps();
  }
  ckpt_.save(step_, [&](const std::string& dir) { components_.save(dir); });
}

bool Trainer::maybe_resume() {
  if (opt_.resume.empty()) return false;
  const std::optional<CheckpointInfo> info =
      opt_.resume == "auto" ? ckpt_.latest_committed() : ckpt_.open(opt_.resume);
  if (!info) {
    if (comm_.is_root())
      spdlog::info("pretrain: --resume auto found no committed checkpoint: fresh start");
    return false;
  }
  const json now = data_identity(data_.train.manifest(), opt_.data_dir);
  const json then = other_data(info->dir, now);
  if (!then.is_null() && !opt_.resume_on_changed_data) refuse_other_data(info->dir, then, now);
  refuse_other_model(info->dir, cfg_.model);
  check_resume_settings(comm_, info->dir, opt_.config_yaml);
  if (!then.is_null()) data_change_ = {{"checkpoint", info->dir}, {"from", then}, {"to", now}};
  components_.load(info->dir, info->world_size);
  if (resume_in_epoch_) step_in_epoch_ = loop_step_in_epoch_;
  if (!data_change_.is_null()) start_on_changed_data();
  if (comm_.is_root())
    spdlog::info("pretrain: resumed from {} (step {}, epoch {}, written by {} ranks)", info->dir,
                 step_, epoch_, info->world_size);
  return true;
}

}  // namespace fnvlp::train
