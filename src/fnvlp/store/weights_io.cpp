#include "fnvlp/store/weights_io.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "fnvlp/comm/job_main.hpp"
#include "fnvlp/core/config.hpp"
#include "fnvlp/core/error.hpp"
#include "fnvlp/model/albef.hpp"
#include "fnvlp/store/run_dir.hpp"
#include "fnvlp/store/safetensors.hpp"
#include "fnvlp/store/torch_pickle.hpp"

namespace fnvlp::store {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

std::string shape_str(c10::IntArrayRef s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

const std::map<std::string, torch::ScalarType> kFloatTypes = {{"F32", torch::kFloat},
                                                              {"F16", torch::kHalf},
                                                              {"BF16", torch::kBFloat16},
                                                              {"F64", torch::kDouble}};

// One file's tensors by (unwrapped) name, each read when asked for.
class WeightFile {
 public:
  explicit WeightFile(const std::string& path) : path_(path) {
    std::ifstream in(path, std::ios::binary);
    FNVLP_CHECK(in.good(), path << ": cannot open weights file");
    char magic[4] = {0, 0, 0, 0};
    in.read(magic, 4);
    in.close();
    if (magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4)
      open_torch();
    else if (static_cast<unsigned char>(magic[0]) == 0x80)
      FNVLP_FAIL(path << ": a torch.save file in the legacy (pre-1.6) format, which fnvlp does "
                         "not read: save it again with torch >= 1.6 (zip format) or as "
                         "safetensors");
    else
      open_safetensors();
    // DistributedDataParallel's prefix, when every name carries it.
    bool all_module = !names_.empty();
    for (const auto& n : names_) all_module = all_module && starts_with(n, "module.");
    if (all_module) {
      std::map<std::string, std::string> key;
      for (auto& n : names_) {
        key[n.substr(7)] = key_.count(n) ? key_[n] : n;
        n = n.substr(7);
      }
      key_ = std::move(key);
      std::map<std::string, const TorchSaveTensor*> t;
      for (auto& [n, v] : torch_) t[starts_with(n, "module.") ? n.substr(7) : n] = v;
      torch_ = std::move(t);
    }
    FNVLP_CHECK(!names_.empty(), path << ": holds no tensors");
  }

  const std::string& path() const { return path_; }
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& n) const { return key_.count(n) > 0; }

  std::vector<int64_t> shape(const std::string& n) const {
    if (header_) return header_->find(key_.at(n))->shape;
    return torch_.at(n)->size;
  }

  // Throws unless tensor n holds floating-point values.
  void check_float(const std::string& n) const {
    const std::string& k = key_.at(n);
    const bool ok = header_ ? kFloatTypes.count(header_->find(k)->dtype) > 0
                            : c10::isFloatingType(torch_.at(n)->dtype);
    if (ok) return;
    std::ostringstream type;
    if (header_)
      type << header_->find(k)->dtype;
    else
      type << torch_.at(n)->dtype;
    FNVLP_FAIL(path_ << ": tensor '" << k << "' has dtype " << type.str()
                     << ", not a floating-point type a weight can take");
  }

  // Reads tensor n straight into `dst` (contiguous float32 of its shape) when it is stored as
  // float32 in a safetensors file: no intermediate copy. False otherwise.
  bool read_into(const std::string& n, torch::Tensor& dst) const {
    if (!header_) return false;
    const SafetensorsEntry* e = header_->find(key_.at(n));
    if (e->dtype != "F32" || !dst.is_contiguous() || dst.scalar_type() != torch::kFloat ||
        !dst.device().is_cpu() || static_cast<uint64_t>(dst.nbytes()) != e->end - e->begin)
      return false;
    read_safetensors_bytes(*header_, *e, dst.data_ptr());
    return true;
  }

  // float32, contiguous, on the host.
  torch::Tensor read(const std::string& n) const {
    const std::string& k = key_.at(n);
    if (header_) {
      check_float(n);
      const SafetensorsEntry* e = header_->find(k);
      auto t = torch::empty(e->shape, torch::TensorOptions().dtype(kFloatTypes.at(e->dtype)));
      read_safetensors_bytes(*header_, *e, t.data_ptr());
      return t.to(torch::kFloat).contiguous();
    }
    check_float(n);
    return torch_file_->read(*torch_.at(n)).to(torch::kFloat).contiguous();
  }

 private:
  void open_safetensors() {
    header_ = read_safetensors_header(path_);
    for (const auto& e : header_->tensors) {
      names_.push_back(e.name);
      key_[e.name] = e.name;
    }
  }

  void open_torch() {
    torch_file_ = std::make_unique<TorchSaveFile>(path_);
    for (const auto& t : torch_file_->tensors()) {
      names_.push_back(t.name);
      key_[t.name] = t.name;
      torch_[t.name] = &t;
    }
  }

  std::string path_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> key_;  // name -> name in the file (before unwrapping)
  std::optional<SafetensorsHeader> header_;
  std::unique_ptr<TorchSaveFile> torch_file_;
  std::map<std::string, const TorchSaveTensor*> torch_;
};

enum class Layout { kTimmVit, kHfBert, kAlbef, kFnvlp };

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kTimmVit:
      return "timm_vit";
    case Layout::kHfBert:
      return "hf_bert";
    case Layout::kAlbef:
      return "albef";
    case Layout::kFnvlp:
      return "fnvlp";
  }
  return "?";
}

struct Names {
  Layout layout = Layout::kFnvlp;
  std::string vis, bert, cls;  // prefixes of the vision encoder, BERT and its MLM head
  bool momentum = false;       // ALBEF's momentum copy (the heads' names end in _m)
  bool none = false;           // the file holds nothing for the model asked for
};

Names detect(const WeightFile& f, WeightsCopy copy) {
  auto any = [&](auto pred) {
    for (const auto& n : f.names())
      if (pred(n)) return true;
    return false;
  };
  Names r;
  if (any([](auto& n) {
        return starts_with(n, "text_layers.") || starts_with(n, "text_embeddings.");
      })) {
    r.layout = Layout::kFnvlp;
  } else if (any([](auto& n) {
               return starts_with(n, "visual_encoder.") || starts_with(n, "text_encoder.");
             })) {
    r.layout = Layout::kAlbef;
    r.vis = "visual_encoder.";
    r.bert = any([](auto& n) { return starts_with(n, "text_encoder.bert."); })
                 ? "text_encoder.bert."
                 : "text_encoder.";
    r.cls = "text_encoder.cls.";
  } else if (f.has("patch_embed.proj.weight") || f.has("blocks.0.attn.qkv.weight")) {
    r.layout = Layout::kTimmVit;
  } else if (any([](auto& n) {
               return ends_with(n, "encoder.layer.0.attention.self.query.weight") ||
                      ends_with(n, "embeddings.word_embeddings.weight");
             })) {
    r.layout = Layout::kHfBert;
    r.bert = any([](auto& n) { return starts_with(n, "bert."); }) ? "bert." : "";
    r.cls = "cls.";
  } else {
    std::ostringstream first;
    for (size_t i = 0; i < f.names().size() && i < 5; ++i) first << (i ? ", " : "") << f.names()[i];
    FNVLP_FAIL(f.path() << ": tensor names of no known layout (timm ViT/DeiT, Hugging Face BERT, "
                           "ALBEF, fnvlp); the first: "
                        << first.str());
  }
  if (copy == WeightsCopy::kMomentum) {
    r.momentum = true;
    r.none = r.layout != Layout::kAlbef ||
             !any([](auto& n) { return starts_with(n, "visual_encoder_m."); });
    r.vis = "visual_encoder_m.";
    r.bert = any([](auto& n) { return starts_with(n, "text_encoder_m.bert."); })
                 ? "text_encoder_m.bert."
                 : "text_encoder_m.";
    r.cls = "text_encoder_m.cls.";
  }
  return r;
}

enum class Kind { kPlain, kVisionPos, kTextPos };

struct Recipe {
  std::vector<std::string> sources;  // joined along dim 0
  bool optional = false;             // a file of this layout may lack it
  Kind kind = Kind::kPlain;
};

// Splits "a.b.c" at dots.
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == '.') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// Where fnvlp parameter `p` comes from in a file of layout `n.layout`; nullopt where that layout
// has no counterpart (BERT's cross-attention, DeiT's text side).
std::optional<Recipe> recipe_for(const Names& n, const std::string& p,
                                 const model::ModelConfig& cfg) {
  if (n.none) return std::nullopt;
  if (n.layout == Layout::kFnvlp)
    return Recipe{{p}, false, p == "visual_encoder.pos_embed" ? Kind::kVisionPos : Kind::kPlain};
  const bool vision = n.layout == Layout::kTimmVit || n.layout == Layout::kAlbef;
  const bool text = n.layout == Layout::kHfBert || n.layout == Layout::kAlbef;
  const auto parts = split(p);
  if (parts[0] == "visual_encoder") {
    if (!vision) return std::nullopt;
    const std::string r = p.substr(std::string("visual_encoder.").size());
    if (r == "pos_embed") return Recipe{{n.vis + r}, false, Kind::kVisionPos};
    if (r == "cls_token" || starts_with(r, "norm.")) return Recipe{{n.vis + r}};
    if (parts[1] == "patch_embed") return Recipe{{n.vis + "patch_embed.proj." + parts[2]}};
    if (parts[1] == "blocks" && parts.size() == 5) {
      const std::string& m = parts[3];
      const std::string base = n.vis + "blocks." + parts[2] + ".";
      if (m == "qkv" || m == "proj") return Recipe{{base + "attn." + m + "." + parts[4]}};
      if (m == "fc1" || m == "fc2") return Recipe{{base + "mlp." + m + "." + parts[4]}};
      return Recipe{{base + m + "." + parts[4]}};
    }
    return std::nullopt;
  }
  if (!text) return std::nullopt;
  if (parts[0] == "text_embeddings") {
    const std::string e = n.bert + "embeddings.";
    if (parts[1] == "LayerNorm") return Recipe{{e + "LayerNorm." + parts[2]}};
    return Recipe{{e + parts[1] + ".weight"},
                  false,
                  parts[1] == "position_embeddings" ? Kind::kTextPos : Kind::kPlain};
  }
  if ((parts[0] == "text_layers" || parts[0] == "fusion_layers") && parts.size() == 4) {
    const int64_t layer =
        std::stoll(parts[1]) + (parts[0] == "fusion_layers" ? cfg.text_layers : 0);
    const std::string base = n.bert + "encoder.layer." + std::to_string(layer) + ".";
    const std::string& m = parts[2];
    const std::string& wb = parts[3];
    if (m == "self_qkv")
      return Recipe{{base + "attention.self.query." + wb, base + "attention.self.key." + wb,
                     base + "attention.self.value." + wb}};
    if (m == "self_output") return Recipe{{base + "attention.output.dense." + wb}};
    if (m == "self_norm") return Recipe{{base + "attention.output.LayerNorm." + wb}};
    if (m == "intermediate") return Recipe{{base + "intermediate.dense." + wb}};
    if (m == "output") return Recipe{{base + "output.dense." + wb}};
    if (m == "output_norm") return Recipe{{base + "output.LayerNorm." + wb}};
    if (n.layout != Layout::kAlbef) return std::nullopt;  // BERT has no cross-attention
    if (m == "cross_q") return Recipe{{base + "crossattention.self.query." + wb}};
    if (m == "cross_kv")
      return Recipe{
          {base + "crossattention.self.key." + wb, base + "crossattention.self.value." + wb}};
    if (m == "cross_output") return Recipe{{base + "crossattention.output.dense." + wb}};
    if (m == "cross_norm") return Recipe{{base + "crossattention.output.LayerNorm." + wb}};
    return std::nullopt;
  }
  // The MLM head: BertForMaskedLM and ALBEF's pretraining model have it, BertModel and ALBEF's
  // retrieval model do not.
  if (parts[0] == "mlm_dense")
    return Recipe{{n.cls + "predictions.transform.dense." + parts[1]}, true};
  if (parts[0] == "mlm_norm")
    return Recipe{{n.cls + "predictions.transform.LayerNorm." + parts[1]}, true};
  if (parts[0] == "mlm_bias") return Recipe{{n.cls + "predictions.bias"}, true};
  if (n.layout != Layout::kAlbef) return std::nullopt;
  if (n.momentum && (parts[0] == "vision_proj" || parts[0] == "text_proj"))
    return Recipe{{parts[0] + "_m." + parts[1]}};
  if (n.momentum) return std::nullopt;  // ALBEF's momentum model has no ITM head or temperature
  if (parts[0] == "vision_proj" || parts[0] == "text_proj" || parts[0] == "itm_head" ||
      parts[0] == "temp")
    return Recipe{{p}};
  return std::nullopt;
}

// A name as the file has it: BERT checkpoints of the TensorFlow era call LayerNorm's parameters
// gamma and beta.
std::optional<std::string> resolve(const WeightFile& f, const std::string& name) {
  if (f.has(name)) return name;
  for (const auto& [from, to] :
       {std::pair<std::string, std::string>{"LayerNorm.weight", "LayerNorm.gamma"},
        {"LayerNorm.bias", "LayerNorm.beta"}})
    if (ends_with(name, from)) {
      const std::string alt = name.substr(0, name.size() - from.size()) + to;
      if (f.has(alt)) return alt;
    }
  return std::nullopt;
}

// ALBEF's interpolate_pos_embed: the grid part resized bicubically, the [CLS] row kept.
torch::Tensor interpolate_pos_embed(const torch::Tensor& src, int64_t num_patches,
                                    const std::string& where) {
  const int64_t extra = 1, w = src.size(-1);
  const int64_t old_grid = std::llround(std::sqrt(static_cast<double>(src.size(1) - extra)));
  const int64_t new_grid = std::llround(std::sqrt(static_cast<double>(num_patches)));
  FNVLP_CHECK(old_grid * old_grid + extra == src.size(1),
              where << ": position embedding " << src.sizes() << " is not [CLS] + a square grid");
  if (old_grid == new_grid) return src;
  auto grid = src.slice(1, extra).reshape({-1, old_grid, old_grid, w}).permute({0, 3, 1, 2});
  grid =
      torch::nn::functional::interpolate(grid, torch::nn::functional::InterpolateFuncOptions()
                                                   .size(std::vector<int64_t>{new_grid, new_grid})
                                                   .mode(torch::kBicubic)
                                                   .align_corners(false));
  grid = grid.permute({0, 2, 3, 1}).flatten(1, 2);
  return torch::cat({src.slice(1, 0, extra), grid}, 1).contiguous();
}

}  // namespace

WeightsImportReport import_weights(const std::vector<std::string>& files, model::AlbefImpl& model,
                                   WeightsCopy copy) {
  const model::ModelConfig& cfg = model.config();
  std::vector<WeightFile> opened;
  std::vector<Names> names;
  for (const auto& f : files) {
    opened.emplace_back(f);
    names.push_back(detect(opened.back(), copy));
  }
  WeightsImportReport report;
  std::vector<std::set<std::string>> used(opened.size());
  // Every name, shape and dtype is checked from the files' headers before a byte of weights is
  // read or a parameter changes; then each parameter is read in turn, so the import holds one
  // tensor beside the model (a model-sized staging copy would double its memory).
  struct Plan {
    torch::Tensor param;
    size_t file;
    std::vector<std::string> parts;
    Kind transform;  // kPlain, or the interpolation / cut to apply
  };
  std::vector<Plan> plans;
  for (auto& item : model.named_parameters()) {
    const std::string& p = item.key();
    const torch::Tensor& param = item.value();
    std::optional<size_t> from;
    for (size_t i = 0; i < opened.size(); ++i) {
      const auto r = recipe_for(names[i], p, cfg);
      if (!r) continue;
      std::vector<std::string> found, missing;
      for (const auto& s : r->sources) {
        if (const auto k = resolve(opened[i], s))
          found.push_back(*k);
        else
          missing.push_back(s);
      }
      if (found.empty() && r->optional) continue;
      if (!missing.empty()) {
        std::ostringstream os;
        for (size_t j = 0; j < missing.size(); ++j) os << (j ? ", " : "") << missing[j];
        FNVLP_FAIL(opened[i].path()
                   << " (" << layout_name(names[i].layout) << "): no tensor " << os.str()
                   << " for parameter " << p << " " << shape_str(param.sizes()));
      }
      FNVLP_CHECK(!from, "parameter " << p << " is in both " << opened[*from].path() << " and "
                                      << opened[i].path() << ": pass each part once");
      from = i;
      std::ostringstream src;
      src << opened[i].path() << ": ";
      for (size_t j = 0; j < found.size(); ++j) src << (j ? " + " : "") << found[j];
      const std::string where = src.str();
      // The parts joined along dim 0.
      std::vector<int64_t> shape = opened[i].shape(found[0]);
      for (size_t j = 0; j < found.size(); ++j) {
        opened[i].check_float(found[j]);
        const auto sj = opened[i].shape(found[j]);
        FNVLP_CHECK(j == 0 || (!sj.empty() && sj.size() == shape.size() &&
                               std::equal(sj.begin() + 1, sj.end(), shape.begin() + 1)),
                    where << ": parts of shapes " << shape_str(opened[i].shape(found[0])) << " and "
                          << shape_str(sj) << " cannot be joined");
        if (j > 0) shape[0] += sj[0];
      }
      Kind transform = Kind::kPlain;
      if (r->kind == Kind::kVisionPos && shape.size() == 3 && shape[1] != param.size(1)) {
        const int64_t g = std::llround(std::sqrt(static_cast<double>(shape[1] - 1)));
        FNVLP_CHECK(shape[1] > 1 && g * g + 1 == shape[1],
                    where << ": position embedding " << shape_str(shape)
                          << " is not [CLS] + a square grid");
        src << " (interpolated from " << shape_str(shape) << ")";
        shape[1] = 1 + cfg.num_patches();
        transform = Kind::kVisionPos;
      } else if (r->kind == Kind::kTextPos && shape.size() == 2 && shape[0] > param.size(0)) {
        src << " (first " << param.size(0) << " of " << shape[0] << " positions)";
        shape[0] = param.size(0);
        transform = Kind::kTextPos;
      }
      if (c10::IntArrayRef(shape) != param.sizes()) {
        std::string hint;
        if (p == "text_embeddings.word_embeddings" || p == "mlm_bias")
          hint =
              ": the file's vocabulary differs from model.vocab_size (shard the data with the "
              "vocabulary the weights were trained on, and set model.vocab_size to its size)";
        FNVLP_FAIL(where << ": shape " << shape_str(shape) << " where parameter " << p << " needs "
                         << shape_str(param.sizes()) << hint);
      }
      for (const auto& k : found) used[i].insert(k);
      plans.push_back({param, i, found, transform});
      report.loaded.emplace_back(p, src.str());
    }
    if (!from) report.left_at_init.push_back(p);
  }
  for (size_t i = 0; i < opened.size(); ++i) {
    WeightsImportReport::FileReport fr{opened[i].path(), layout_name(names[i].layout), {}};
    for (const auto& n : opened[i].names())
      if (!used[i].count(n)) fr.unused.push_back(n);
    FNVLP_CHECK(used[i].size() > 0 || copy == WeightsCopy::kMomentum,
                opened[i].path() << " (" << fr.layout << "): no tensor in it fits this model");
    report.files.push_back(std::move(fr));
  }
  torch::NoGradGuard no_grad;
  for (auto& plan : plans) {
    const WeightFile& f = opened[plan.file];
    if (plan.parts.size() == 1 && plan.transform == Kind::kPlain &&
        f.read_into(plan.parts[0], plan.param))
      continue;
    std::vector<torch::Tensor> parts;
    for (const auto& k : plan.parts) parts.push_back(f.read(k));
    torch::Tensor v = parts.size() == 1 ? parts[0] : torch::cat(parts, 0);
    if (plan.transform == Kind::kVisionPos)
      v = interpolate_pos_embed(v, cfg.num_patches(), f.path());
    else if (plan.transform == Kind::kTextPos)
      v = v.slice(0, 0, plan.param.size(0));
    plan.param.copy_(v);
  }
  return report;
}

std::string WeightsImportReport::to_json() const {
  nlohmann::json j;
  j["files"] = nlohmann::json::array();
  for (const auto& f : files)
    j["files"].push_back({{"file", f.file}, {"layout", f.layout}, {"unused", f.unused}});
  j["loaded"] = nlohmann::json::object();
  for (const auto& [p, s] : loaded) j["loaded"][p] = s;
  j["left_at_init"] = left_at_init;
  return j.dump(2) + "\n";
}

std::string WeightsImportReport::summary() const {
  std::ostringstream os;
  for (const auto& f : files)
    os << f.file << " (" << f.layout << "): " << f.unused.size() << " tensor(s) unused"
       << (f.unused.empty() ? "" : ", e.g. " + f.unused.front()) << "\n";
  os << loaded.size() << " parameter(s) loaded, " << left_at_init.size()
     << " left at their initialisation";
  for (size_t i = 0; i < left_at_init.size() && i < 4; ++i)
    os << (i ? ", " : ": ") << left_at_init[i];
  if (left_at_init.size() > 4) os << ", ...";
  return os.str();
}

void import_initial_weights(const Comm& comm, const std::vector<std::string>& files,
                            model::AlbefImpl& model, const std::string& report_path,
                            WeightsCopy copy) {
  std::string error;
  if (comm.is_root()) {
    try {
      const WeightsImportReport report = import_weights(files, model, copy);
      spdlog::info("init weights{}: {}", copy == WeightsCopy::kMomentum ? " (momentum model)" : "",
                   report.summary());
      if (!report_path.empty()) write_file_atomic(report_path, report.to_json());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  comm.bcast(error);
  if (!error.empty()) throw UsageError("--init-from: " + error);
}

void export_albef_safetensors(const model::AlbefImpl& model, const std::string& path,
                              const std::vector<std::pair<std::string, std::string>>& extra) {
  const model::ModelConfig& cfg = model.config();
  const Names albef{Layout::kAlbef, "visual_encoder.", "text_encoder.bert.", "text_encoder.cls."};
  std::vector<torch::Tensor> keep;  // owns the bytes the entries point at
  std::vector<SafetensorsOut> out;
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    keep.push_back(t.detach().to(torch::kCPU, torch::kFloat).contiguous());
    out.push_back({name, "F32", keep.back().sizes().vec(), keep.back().data_ptr()});
  };
  for (const auto& item : model.named_parameters()) {
    const auto r = recipe_for(albef, item.key(), cfg);
    FNVLP_CHECK(r, "export: parameter " << item.key() << " has no name in ALBEF's layout");
    if (r->sources.size() == 1) {
      add(r->sources[0], item.value());
      continue;
    }
    const auto parts = item.value().chunk(static_cast<int64_t>(r->sources.size()), 0);
    for (size_t i = 0; i < parts.size(); ++i) add(r->sources[i], parts[i]);
  }
  // ALBEF's BertForMaskedLM stores the tied decoder too; a strict load_state_dict expects it.
  add("text_encoder.cls.predictions.decoder.weight", model.mlm_decoder_weight());
  add("text_encoder.cls.predictions.decoder.bias", model.mlm_bias());
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"fnvlp.layout", "albef"},
                                          {"fnvlp.model", config::dump(config::to_yaml(cfg))}};
  for (const auto& [k, v] : extra) meta[k] = v;
  write_safetensors(path, out, meta);
}

}  // namespace fnvlp::store
