#!/usr/bin/env python3
"""Independent reference for sao's model loading, forward pass and export.

Written from the Hugging Face transformers modelling definitions of
LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM
(RMSNorm, rotary embeddings with rotate_half and the default / linear /
llama3 frequency rules, grouped-query attention, SwiGLU MLP, Qwen2's q/k/v
bias, Qwen3's per-head q/k RMSNorm) and computed in float64, so its logits
are the exact values sao's float32 ones are compared against. It shares no
code with sao: safetensors files are read and written here by hand from the
published format (8-byte little-endian header length, JSON header, raw
little-endian data), shards through model.safetensors.index.json.

  make DIR --layout L [--dtype bf16|fp16|fp32] [--shards N] [--seed S] [--vocab V]
      writes a random-weight Hugging Face directory of layout L (llama,
      llama3, mistral, qwen2, qwen3) as transformers' save_pretrained lays it out
  forward DIR IDS.json OUT.safetensors [--adapter ADAPTER_DIR]
      logits [B, T, V] (F64) of every sequence in IDS.json ([[id, ...], ...],
      equal lengths) under the directory's config and weights; with
      --adapter, with the LoRA adapter directory applied as Hugging Face PEFT
      defines it (see load_peft_adapter)

Needs Debian's python3-torch (CPU); no transformers, no network.
"""
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32}
NAMES = {v: k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        raw = bytearray(data[base + begin:base + end])
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(entry["shape"]).clone()
    return tensors


def write_safetensors(path, tensors):
    header = {"__metadata__": {"format": "pt"}}
    chunks = []
    offset = 0
    for name, tensor in tensors.items():
        raw = tensor.contiguous().view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header[name] = {"dtype": NAMES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def load_weights(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for name in files:
        weights.update(read_safetensors(os.path.join(directory, name)))
    return {k: v.to(torch.float64) for k, v in weights.items()}


def load_peft_adapter(directory, weights):
    """A PEFT LoRA adapter directory, read as PeftModel.from_pretrained reads
    it (PEFT's LoraConfig and LoraLayer): adapter_config.json gives r,
    lora_alpha and target_modules (a module is targeted when its name is a
    target or ends in "." + target; "all-linear" is every linear layer but
    the output head); adapter_model.safetensors holds, for each targeted
    module M, "base_model.model.M.lora_A.weight" [r, in] and
    "base_model.model.M.lora_B.weight" [out, r]; a targeted linear computes
    W x + (lora_alpha / r) * B (A x) (dropout is off in evaluation). Returns
    {module: (A, B, scaling)}. Keys that match no targeted module, and
    targeted modules without both tensors, are errors here (PEFT reports
    the first as unexpected and leaves the second at its initialisation)."""
    with open(os.path.join(directory, "adapter_config.json")) as f:
        config = json.load(f)
    if config.get("peft_type") != "LORA":
        sys.exit("adapter: peft_type is not LORA")
    for key in ("use_rslora", "use_dora", "fan_in_fan_out"):
        if config.get(key):
            sys.exit("adapter: this reference does not compute " + key)
    if config.get("bias", "none") != "none":
        sys.exit("adapter: bias is not none")
    r = config["r"]
    scaling = config["lora_alpha"] / r
    targets = config["target_modules"]
    linear_modules = sorted({name[:-len(".weight")] for name in weights
                             if name.endswith(".weight") and weights[name].dim() == 2
                             and not name.startswith("lm_head") and "embed_tokens" not in name})
    if targets == "all-linear":
        targeted = linear_modules
    else:
        if isinstance(targets, str):
            targets = [targets]
        targeted = [m for m in linear_modules if any(m == t or m.endswith("." + t) for t in targets)]
    tensors = read_safetensors(os.path.join(directory, "adapter_model.safetensors"))
    prefix = "base_model.model."
    adapters = {}
    for module in targeted:
        a_key, b_key = prefix + module + ".lora_A.weight", prefix + module + ".lora_B.weight"
        if a_key not in tensors or b_key not in tensors:
            sys.exit("adapter: no lora_A/lora_B for targeted module " + module)
        a, b = tensors.pop(a_key).to(torch.float64), tensors.pop(b_key).to(torch.float64)
        if a.shape[0] != r or b.shape[1] != r:
            sys.exit("adapter: rank of " + module + " is not r")
        adapters[module] = (a, b, scaling)
    if tensors:
        sys.exit("adapter: unexpected keys " + ", ".join(sorted(tensors)))
    return adapters


# --- the model, as transformers defines it -----------------------------------

def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def inverse_frequencies(config, head_dim):
    base = config.get("rope_theta", 10000.0)
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled)
    assert kind == "default", kind
    return inv_freq


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(config, w, ids, adapters=None):
    adapters = adapters or {}
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    eps = config.get("rms_norm_eps", 1e-6)
    qwen3 = config["model_type"] == "qwen3"
    batch, steps = ids.shape
    inv_freq = inverse_frequencies(config, head_dim)
    positions = torch.arange(steps, dtype=torch.float64)
    freqs = torch.outer(positions, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    causal = torch.ones(steps, steps, dtype=torch.bool).tril()

    def linear(x, name):
        y = x @ w[name + ".weight"].T
        if name + ".bias" in w:
            y = y + w[name + ".bias"]
        if name in adapters:
            a, b, scaling = adapters[name]
            y = y + scaling * ((x @ a.T) @ b.T)
        return y

    h = w["model.embed_tokens.weight"][ids]
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = linear(x, p + "self_attn.q_proj").view(batch, steps, heads, head_dim)
        k = linear(x, p + "self_attn.k_proj").view(batch, steps, kv_heads, head_dim)
        v = linear(x, p + "self_attn.v_proj").view(batch, steps, kv_heads, head_dim)
        if qwen3:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
        scores = scores.masked_fill(~causal, float("-inf"))
        context = torch.softmax(scores, dim=-1) @ v
        context = context.transpose(1, 2).reshape(batch, steps, heads * head_dim)
        h = h + linear(context, p + "self_attn.o_proj")
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gate = linear(x, p + "mlp.gate_proj")
        h = h + linear(torch.nn.functional.silu(gate) * linear(x, p + "mlp.up_proj"), p + "mlp.down_proj")
    h = rms_norm(h, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if config.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return h @ head.T


# --- random directories of each layout ----------------------------------------

LAYOUTS = {
    # Llama 3.1: untied, GQA, rope_scaling llama3 (the band matters: the
    # original context is shorter than the test sequences' wavelengths).
    "llama3": dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=64, intermediate_size=96,
                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0,
                   tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    "llama": dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=48, intermediate_size=80,
                  num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=3, rope_theta=10000.0,
                  tie_word_embeddings=True, rope_scaling={"type": "linear", "factor": 2.0}),
    "mistral": dict(model_type="mistral", architectures=["MistralForCausalLM"], hidden_size=64,
                    intermediate_size=128, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                    rope_theta=1000000.0, tie_word_embeddings=False, sliding_window=None),
    "qwen2": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, rope_theta=1000000.0,
                  tie_word_embeddings=True, use_sliding_window=False, sliding_window=32, max_window_layers=2),
    # Qwen3: head_dim 32 with 4 heads of a 64-wide model (q_proj widens).
    "qwen3": dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], hidden_size=64, intermediate_size=96,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  rope_theta=1000000.0, tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
                  sliding_window=None, max_window_layers=2),
}


def make(directory, layout, dtype, shards, seed, vocab):
    config = dict(LAYOUTS[layout])
    config.update(vocab_size=vocab, max_position_embeddings=64, rms_norm_eps=1e-6, hidden_act="silu",
                  torch_dtype={"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dtype],
                  bos_token_id=1, eos_token_id=2, initializer_range=0.02, transformers_version="4.51.0")
    generator = torch.Generator().manual_seed(seed)
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads = config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    ffn = config["intermediate_size"]
    bias = config["model_type"] == "qwen2"
    tensors = {}

    def add(name, *shape, norm=False):
        if norm:  # gains near 1, not exactly 1, so a missed norm shows
            t = 1.0 + 0.1 * torch.randn(*shape, generator=generator, dtype=torch.float64)
        else:
            t = 0.08 * torch.randn(*shape, generator=generator, dtype=torch.float64)
        tensors[name] = t.to(DTYPES[dtype])

    add("model.embed_tokens.weight", vocab, hidden)
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        add(p + "input_layernorm.weight", hidden, norm=True)
        add(p + "self_attn.q_proj.weight", heads * head_dim, hidden)
        add(p + "self_attn.k_proj.weight", kv_heads * head_dim, hidden)
        add(p + "self_attn.v_proj.weight", kv_heads * head_dim, hidden)
        if bias:
            add(p + "self_attn.q_proj.bias", heads * head_dim)
            add(p + "self_attn.k_proj.bias", kv_heads * head_dim)
            add(p + "self_attn.v_proj.bias", kv_heads * head_dim)
        if config["model_type"] == "qwen3":
            add(p + "self_attn.q_norm.weight", head_dim, norm=True)
            add(p + "self_attn.k_norm.weight", head_dim, norm=True)
        add(p + "self_attn.o_proj.weight", hidden, heads * head_dim)
        add(p + "mlp.gate_proj.weight", ffn, hidden)
        add(p + "mlp.up_proj.weight", ffn, hidden)
        add(p + "mlp.down_proj.weight", hidden, ffn)
        add(p + "post_attention_layernorm.weight", hidden, norm=True)
    add("model.norm.weight", hidden, norm=True)
    if not config["tie_word_embeddings"]:
        add("lm_head.weight", vocab, hidden)

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    names = sorted(tensors)  # save_pretrained's shards are not in module order either
    if shards <= 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
        return
    per = (len(names) + shards - 1) // shards
    weight_map = {}
    total = 0
    for i in range(shards):
        part = {n: tensors[n] for n in names[i * per:(i + 1) * per]}
        file = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        write_safetensors(os.path.join(directory, file), part)
        for n, t in part.items():
            weight_map[n] = file
            total += t.numel() * t.element_size()
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def main(argv):
    if len(argv) >= 2 and argv[0] == "make":
        options = {"--layout": "llama", "--dtype": "bf16", "--shards": "1", "--seed": "1", "--vocab": "320"}
        rest = argv[2:]
        for i in range(0, len(rest), 2):
            if rest[i] not in options:
                sys.exit("unknown option " + rest[i])
            options[rest[i]] = rest[i + 1]
        dtype = {"bf16": "BF16", "fp16": "F16", "fp32": "F32"}[options["--dtype"]]
        make(argv[1], options["--layout"], dtype, int(options["--shards"]), int(options["--seed"]),
             int(options["--vocab"]))
        return 0
    if len(argv) in (4, 6) and argv[0] == "forward":
        with open(os.path.join(argv[1], "config.json")) as f:
            config = json.load(f)
        with open(argv[2]) as f:
            ids = torch.tensor(json.load(f), dtype=torch.int64)
        weights = load_weights(argv[1])
        adapters = None
        if len(argv) == 6:
            if argv[4] != "--adapter":
                sys.exit("unknown option " + argv[4])
            adapters = load_peft_adapter(argv[5], weights)
        logits = forward(config, weights, ids, adapters)
        write_safetensors(argv[3], {"logits": logits.contiguous()})
        return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
