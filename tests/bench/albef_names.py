"""The PyTorch twin's parameter names (pytorch_albef.Albef, the same as fnvlp's) in other projects'
layouts, written independently of fnvlp's C++ maps (src/fnvlp/store/weights_io.cpp) so that each
checks the other (tests/golden/make_weights.py, check_export.py):

  timm ViT/DeiT   patch_embed.proj.*, blocks.N.attn.qkv.*, blocks.N.mlp.fc1.*, ...
  HF BERT         bert.embeddings.*, bert.encoder.layer.N.attention.self.{query,key,value}.*,
                  cls.predictions.* (BertForMaskedLM); BERT layer T + j is fusion layer j
  ALBEF           visual_encoder.*, text_encoder.bert.*, text_encoder.cls.*, the heads, temp

to_* take the twin's state_dict and return a new one; from_albef inverts to_albef (how a user loads
fnvlp's export, docs in USAGE.md "Weights in and out").
"""
import torch
import torch.nn.functional as F

_BERT_LAYER = {  # twin module -> BERT module(s) within encoder.layer.N
    "self_qkv": ["attention.self.query", "attention.self.key", "attention.self.value"],
    "self_output": ["attention.output.dense"],
    "self_norm": ["attention.output.LayerNorm"],
    "cross_q": ["crossattention.self.query"],
    "cross_kv": ["crossattention.self.key", "crossattention.self.value"],
    "cross_output": ["crossattention.output.dense"],
    "cross_norm": ["crossattention.output.LayerNorm"],
    "intermediate": ["intermediate.dense"],
    "output": ["output.dense"],
    "output_norm": ["output.LayerNorm"],
}
_VIT_BLOCK = {"qkv": "attn.qkv", "proj": "attn.proj", "fc1": "mlp.fc1", "fc2": "mlp.fc2",
              "norm1": "norm1", "norm2": "norm2"}


def _vision(name, prefix):
    """twin visual_encoder.* name -> timm name with `prefix`."""
    rest = name[len("visual_encoder."):]
    if rest.startswith("patch_embed."):
        return prefix + "patch_embed.proj." + rest.split(".")[-1]
    if rest.startswith("blocks."):
        _, i, mod, wb = rest.split(".")
        return f"{prefix}blocks.{i}.{_VIT_BLOCK[mod]}.{wb}"
    return prefix + rest


def _text(name, m, bert, cls):
    """twin text-side name -> list of BERT names (several: joined along dim 0), or None."""
    parts = name.split(".")
    if parts[0] == "text_embeddings":
        if parts[1] == "LayerNorm":
            return [f"{bert}embeddings.LayerNorm.{parts[2]}"]
        return [f"{bert}embeddings.{parts[1]}.weight"]
    if parts[0] in ("text_layers", "fusion_layers"):
        layer = int(parts[1]) + (m["text_layers"] if parts[0] == "fusion_layers" else 0)
        return [f"{bert}encoder.layer.{layer}.{mod}.{parts[3]}" for mod in _BERT_LAYER[parts[2]]]
    if parts[0] == "mlm_dense":
        return [f"{cls}predictions.transform.dense.{parts[1]}"]
    if parts[0] == "mlm_norm":
        return [f"{cls}predictions.transform.LayerNorm.{parts[1]}"]
    if parts[0] == "mlm_bias":
        return [f"{cls}predictions.bias"]
    return None


def _split(t, n):
    return [c.clone() for c in torch.chunk(t, n, 0)]


def to_timm(sd):
    """The vision encoder as timm's VisionTransformer state_dict (DeiT-B/16's names)."""
    return {_vision(k, ""): v.clone() for k, v in sd.items() if k.startswith("visual_encoder.")}


def to_hf_bert(sd, m, prefix="bert."):
    """Text embeddings, text layers and the fusion layers' BERT parts as BertForMaskedLM's names
    (cross-attention is not in BERT and is dropped); the MLM head under cls.predictions."""
    out = {}
    for k, v in sd.items():
        if k.startswith("visual_encoder.") or ".cross_" in k:
            continue
        names = _text(k, m, prefix, "cls.")
        if names:
            out.update(zip(names, _split(v, len(names))))
    return out


def to_albef(sd, m):
    """ALBEF's model_pretrain.py names for the whole model."""
    out = {}
    for k, v in sd.items():
        if k.startswith("visual_encoder."):
            out[_vision(k, "visual_encoder.")] = v.clone()
        elif k in ("vision_proj.weight", "vision_proj.bias", "text_proj.weight", "text_proj.bias",
                   "itm_head.weight", "itm_head.bias", "temp"):
            out[k] = v.clone()
        else:
            names = _text(k, m, "text_encoder.bert.", "text_encoder.cls.")
            out.update(zip(names, _split(v, len(names))))
    return out


def from_albef(albef_sd, m, twin_names):
    """The inverse of to_albef for the twin's parameter names `twin_names`: joins ALBEF's
    query/key/value back into the fused projections; extra names in albef_sd are ignored."""
    out = {}
    for k in twin_names:
        if k.startswith("visual_encoder."):
            out[k] = albef_sd[_vision(k, "visual_encoder.")]
        elif k in albef_sd:
            out[k] = albef_sd[k]
        else:
            names = _text(k, m, "text_encoder.bert.", "text_encoder.cls.")
            out[k] = torch.cat([albef_sd[n] for n in names], 0)
    return out


def interpolate_pos_embed(pos_embed, num_patches):
    """ALBEF's vit.interpolate_pos_embed: [1, 1 + g*g, w] -> [1, 1 + num_patches, w] (bicubic,
    align_corners=False, the [CLS] row kept)."""
    w = pos_embed.shape[-1]
    old = int((pos_embed.shape[-2] - 1) ** 0.5)
    new = int(num_patches ** 0.5)
    if old == new:
        return pos_embed
    extra, grid = pos_embed[:, :1], pos_embed[:, 1:]
    grid = grid.reshape(-1, old, old, w).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(new, new), mode="bicubic", align_corners=False)
    return torch.cat((extra, grid.permute(0, 2, 3, 1).flatten(1, 2)), dim=1)
