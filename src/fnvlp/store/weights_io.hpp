#pragma once
// Weights in other projects' files and names (issue 62): ALBEF starts its vision encoder from
// DeiT-B/16 (timm) and its text and fusion encoders from bert-base-uncased (Hugging Face), and its
// users take the result back into PyTorch.
//
// Files: safetensors (store/safetensors.hpp) or torch.save's zip format (read by libtorch's own
// unpickler; a top-level {"model" | "state_dict" | "module": state_dict} wrapper and DDP's
// "module." prefix are unwrapped). The layout of the names is recognised per file:
//   timm ViT/DeiT   patch_embed.proj, blocks.N.attn.qkv, blocks.N.mlp.fc1, ... -> visual encoder
//   HF BERT         [bert.]embeddings.*, [bert.]encoder.layer.N.attention.self.query, ...,
//                   cls.predictions.* -> BERT layers 0..T-1 into the text layers, T..T+F-1 into
//                   the fusion layers (ALBEF's split of one BERT), query/key/value joined into the
//                   fused projection; cross-attention is not in BERT and keeps its initialisation
//   ALBEF           visual_encoder.*, text_encoder.[bert.]*, text_encoder.cls.*, vision_proj,
//                   text_proj, itm_head, temp (ALBEF_4M.pth and its fine-tuned checkpoints)
//   fnvlp           fnvlp's own parameter names (the PyTorch twin's state dict)
// Vision position embeddings of another grid are interpolated as ALBEF's interpolate_pos_embed
// (bicubic, align_corners=False, [CLS] kept); BERT's 512 positions are cut to model.max_len.
// Anything that does not fit is a named error, never a partial load: a tensor whose shape differs
// (file, tensor, expected and found), a required tensor missing from a file of a recognised
// layout, a parameter two files both provide, an unreadable or hostile file.
#include <cstdint>
#include <string>
#include <vector>

#include "fnvlp/comm/comm.hpp"
#include "fnvlp/model/model_config.hpp"

namespace fnvlp::model {
class AlbefImpl;
}

namespace fnvlp::store {

struct WeightsImportReport {
  struct FileReport {
    std::string file, layout;         // layout: timm_vit, hf_bert, albef, fnvlp
    std::vector<std::string> unused;  // names in the file no parameter took
  };
  std::vector<FileReport> files;
  // fnvlp parameter -> "file: source name(s)" (with " (interpolated ...)" where it was).
  std::vector<std::pair<std::string, std::string>> loaded;
  std::vector<std::string> left_at_init;  // fnvlp parameters no file provided
  std::string to_json() const;            // the whole report, for RUN/init_weights.json
  std::string summary() const;            // a few lines for the log
};

// Which model of a file to read: the online one, or ALBEF's momentum copy (visual_encoder_m.*,
// text_encoder_m.*, vision_proj_m, text_proj_m; ALBEF's momentum model has no ITM head or
// temperature) into a momentum model. Files without momentum copies give it nothing.
enum class WeightsCopy { kOnline, kMomentum };

// Loads every file into `model` (CPU, float32 parameters); throws fnvlp::Error naming the file,
// tensor and reason before any parameter is changed.
WeightsImportReport import_weights(const std::vector<std::string>& files, model::AlbefImpl& model,
                                   WeightsCopy copy = WeightsCopy::kOnline);

// Collective (fnvlp-pretrain / fnvlp-finetune --init-from): rank 0 imports `files` into its
// model, logs the report's summary and writes the whole report to `report_path` (if not empty);
// a failure is a UsageError (exit 2) on every rank. The caller broadcasts the weights.
void import_initial_weights(const Comm& comm, const std::vector<std::string>& files,
                            model::AlbefImpl& model, const std::string& report_path,
                            WeightsCopy copy = WeightsCopy::kOnline);

// Writes the model's parameters to a safetensors file in ALBEF's names (model_pretrain.py's
// ALBEF: visual_encoder.*, text_encoder.bert.*, text_encoder.cls.predictions.* with the tied
// decoder weight written out, vision_proj, text_proj, itm_head, temp), float32, with metadata
// (format "pt", the fnvlp model config as YAML, `extra` entries).
void export_albef_safetensors(const model::AlbefImpl& model, const std::string& path,
                              const std::vector<std::pair<std::string, std::string>>& extra = {});

}  // namespace fnvlp::store
