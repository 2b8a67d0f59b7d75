#!/usr/bin/python3
"""PyTorch eager half of bench/vs_pytorch.

The same workloads as bench_vs_pytorch.cpp, written the way a Python
framework runs them around PyTorch's kernels: a Llama-layout model in the
style of Hugging Face transformers' eager modelling code (RMSNorm in float32,
rotary cos/sin per forward, repeat_kv for grouped-query attention, a KV cache
that grows by torch.cat as transformers' DynamicCache does, logits only for
the last position while generating), and the SAO learner step (K critic
updates on fixed GAE targets, then the DIS actor update) in plain torch ops.

Usage: vs_pytorch.py CONFIG_JSON [WORKLOAD...]   (CONFIG_JSON from
`bench_vs_pytorch --print-config`). Prints one JSON line per workload.
"""
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, groups):
    if groups == 1:
        return x
    b, kv, s, d = x.shape
    return x[:, :, None, :, :].expand(b, kv, groups, s, d).reshape(b, kv * groups, s, d)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads = c["num_attention_heads"]
        self.kv_heads = c["num_key_value_heads"]
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        d = c["hidden_size"]
        self.q_proj = nn.Linear(d, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, d, bias=False)

    def forward(self, x, cos, sin, mask, cache):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            if cache[0] is not None:
                k = torch.cat([cache[0], k], dim=2)
                v = torch.cat([cache[1], v], dim=2)
            cache[0], cache[1] = k, v
        groups = self.heads // self.kv_heads
        k = repeat_kv(k, groups)
        v = repeat_kv(v, groups)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        context = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(context)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, f = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin, mask, cache):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        self.inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, head_dim, 2).float() / head_dim))

    def forward(self, ids, past_length=0, caches=None):
        b, t = ids.shape
        positions = torch.arange(past_length, past_length + t).float()
        freqs = positions[:, None] * self.inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos()[None, None], angles.sin()[None, None]
        mask = None
        if t > 1:  # causal mask over the cached keys and the new ones
            mask = torch.full((t, past_length + t), float("-inf")).triu(past_length + 1)[None, None]
        x = self.embed_tokens(ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, None if caches is None else caches[i])
        return self.norm(x)


class CausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = Backbone(c)
        assert c["tie_word_embeddings"], "vs_pytorch.py models tied embeddings only (sao's default)"

    def logits(self, hidden):
        return F.linear(hidden, self.model.embed_tokens.weight)

    def forward(self, ids):
        return self.logits(self.model(ids))


class ValueModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = Backbone(c)
        self.score = nn.Linear(c["hidden_size"], 1, bias=False)

    def forward(self, ids):
        return self.score(self.model(ids)).squeeze(-1)


def init_weights(module, seed):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm." in name:
                p.fill_(1.0)
            elif name.startswith("score."):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=generator)


@torch.no_grad()
def generate(policy, prompts, new_tokens, generator):
    """Sampling at temperature 1 with a KV cache; returns tokens and log-probs."""
    caches = [[None, None] for _ in policy.model.layers]
    hidden = policy.model(prompts, 0, caches)
    past = prompts.shape[1]
    logits = policy.logits(hidden[:, -1, :])
    tokens, logprobs = [], []
    for step in range(new_tokens):
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        chosen = torch.multinomial(log_probs.exp(), 1, generator=generator)
        tokens.append(chosen)
        logprobs.append(log_probs.gather(1, chosen))
        if step + 1 == new_tokens:
            break
        hidden = policy.model(chosen, past, caches)
        past += 1
        logits = policy.logits(hidden[:, -1, :])
    return torch.cat(tokens, 1), torch.cat(logprobs, 1)


def skip_observation_gae(rewards, values, mask, bootstrap, gamma, lambdas):
    """GAE over action positions only, vectorised over the batch (loop over T)."""
    b, t = rewards.shape
    advantages = torch.zeros_like(values)
    next_value = bootstrap.clone()
    next_advantage = torch.zeros(b, dtype=values.dtype)
    for i in reversed(range(t)):
        m = mask[:, i]
        delta = rewards[:, i] + gamma * next_value - values[:, i]
        advantage = delta + gamma * lambdas * next_advantage
        advantages[:, i] = torch.where(m, advantage, torch.zeros_like(advantage))
        next_value = torch.where(m, values[:, i], next_value)
        next_advantage = torch.where(m, advantage, next_advantage)
    return advantages, advantages + values


def masked_mean(x, mask):
    return torch.where(mask, x, torch.zeros_like(x)).sum() / mask.sum()


class SaoLearner:
    def __init__(self, policy, critic, lc):
        self.policy, self.critic, self.lc = policy, critic, lc
        # The critic's attention is frozen by default (SAO's practical design).
        for name, p in critic.named_parameters():
            if ".self_attn." in name:
                p.requires_grad_(False)
        betas = (lc["adam_beta1"], lc["adam_beta2"])
        self.actor_params = [p for p in policy.parameters() if p.requires_grad]
        self.critic_params = [p for p in critic.parameters() if p.requires_grad]
        self.actor_opt = torch.optim.AdamW(self.actor_params, lr=lc["actor_lr"], betas=betas, eps=lc["adam_eps"],
                                           weight_decay=lc["weight_decay"])
        self.critic_opt = torch.optim.AdamW(self.critic_params, lr=lc["critic_lr"], betas=betas, eps=lc["adam_eps"],
                                            weight_decay=lc["weight_decay"])

    def critic_outputs(self, ids):
        out = self.critic(ids).float()
        values = torch.cat([torch.zeros(ids.shape[0], 1), out[:, :-1]], 1)
        return values, out[:, -1]  # every row has the full length

    def step(self, ids, mask, behaviour, rewards):
        lc, metrics = self.lc, {}
        # As sao does: the first update's forward pass is also the snapshot
        # the fixed targets are computed from (the critic has not changed yet).
        first = self.critic_outputs(ids) if lc["critic_updates"] > 0 else None
        with torch.no_grad():
            values, bootstrap = (first[0].detach(), first[1].detach()) if first else self.critic_outputs(ids)
        b = ids.shape[0]
        critic_lambdas = torch.full((b,), lc["lambda_critic"])
        _, targets = skip_observation_gae(rewards, values, mask, bootstrap, lc["gamma"], critic_lambdas)
        v, r = values.masked_select(mask).double(), targets.masked_select(mask).double()
        metrics["explained_variance"] = 1.0 - (r - v).var(unbiased=False).item() / max(r.var(unbiased=False).item(), 1e-12)
        for k in range(lc["critic_updates"]):
            self.critic_opt.zero_grad()
            predicted, _ = first if k == 0 else self.critic_outputs(ids)
            loss = masked_mean((predicted - targets).pow(2), mask)
            metrics["value_loss"] = loss.item()
            loss.backward()
            metrics["value_grad_norm"] = torch.nn.utils.clip_grad_norm_(self.critic_params, lc["max_grad_norm"]).item()
            self.critic_opt.step()
        with torch.no_grad():
            fresh, bootstrap = self.critic_outputs(ids)
            metrics["value_loss_final"] = masked_mean((fresh - targets).pow(2), mask).item()
        lengths = mask.sum(1).double()
        lambdas = (1.0 - 1.0 / (lc["lambda_alpha"] * lengths)).clamp(0.0, 1.0).float()
        advantages, _ = skip_observation_gae(rewards, fresh, mask, bootstrap, lc["gamma"], lambdas)
        selected = advantages.masked_select(mask)
        metrics["advantage_mean"], metrics["advantage_std"] = selected.mean().item(), selected.std(unbiased=False).item()
        self.actor_opt.zero_grad()
        log_probs = torch.log_softmax(self.policy(ids)[:, :-1].float(), -1)
        token_logprobs = log_probs.gather(2, ids[:, 1:, None]).squeeze(-1)
        logprobs = torch.cat([torch.zeros(b, 1), token_logprobs], 1)
        detached = log_probs.detach()
        entropy = torch.cat([torch.zeros(b, 1), -(detached.exp() * detached).sum(-1)], 1)
        metrics["entropy"] = entropy.masked_select(mask).mean().item()
        # DIS: a strict two-sided trust region on the token ratio; outside it
        # the token contributes nothing.
        log_ratio = torch.where(mask, logprobs - behaviour, torch.zeros_like(logprobs))
        ratio = log_ratio.detach().exp()
        trusted = mask & (ratio > 1.0 - lc["dis_eps_low"]) & (ratio < 1.0 + lc["dis_eps_high"])
        zero = torch.zeros_like(logprobs)
        terms = torch.where(trusted, ratio, zero) * torch.where(trusted, advantages, zero) * logprobs
        loss = -terms.sum() / mask.sum()
        metrics["policy_loss"] = loss.item()
        loss.backward()
        metrics["grad_norm"] = torch.nn.utils.clip_grad_norm_(self.actor_params, lc["max_grad_norm"]).item()
        self.actor_opt.step()
        return metrics


def median_seconds(iterations, body):
    body()  # warm-up, as in bench_vs_pytorch.cpp
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        body()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(workload, settings):
    c, lc, shapes = settings["model"], settings["learner"], settings["shapes"]
    torch.manual_seed(1)
    policy = CausalLM(c)
    init_weights(policy, 1)
    if workload == "learner":
        critic = ValueModel(c)
        critic.model.load_state_dict(policy.model.state_dict())
        learner = SaoLearner(policy, critic, lc)
        batch, response = shapes["learner_batch"], shapes["learner_response_tokens"]
        generator = torch.Generator().manual_seed(7)
        prompts = []
        for _ in range(batch):
            a, b = torch.randint(10, 100, (2,), generator=generator).tolist()
            prompts.append([257] + [ord(ch) for ch in f"{a}+{b}="])
        prompt_ids = torch.tensor(prompts)
        tokens, logprobs = generate(policy, prompt_ids, response, generator)
        ids = torch.cat([prompt_ids, tokens], 1)
        prompt_length = prompt_ids.shape[1]
        mask = torch.zeros(ids.shape, dtype=torch.bool)
        mask[:, prompt_length:] = True
        behaviour = torch.zeros(ids.shape)
        behaviour[:, prompt_length:] = logprobs
        rewards = torch.zeros(ids.shape)
        rewards[:, -1] = (torch.arange(batch) % 2).float()
        seconds = median_seconds(5, lambda: learner.step(ids, mask, behaviour, rewards))
        return seconds, float(ids.numel()), "trained tokens"
    if workload.startswith("train_b"):
        batch, length = int(workload[7:]), shapes["train_tokens"]
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
        ids = torch.randint(0, c["vocab_size"], (batch, length))

        def train_step():
            optimizer.zero_grad()
            torch.log_softmax(policy(ids), -1).mean().backward()
            optimizer.step()

        return median_seconds(10, train_step), float(batch * length), "tokens"
    if workload.startswith("decode_b"):
        batch, new_tokens = int(workload[8:]), shapes["decode_new_tokens"]
        prompts = torch.tensor([shapes["decode_prompt"]] * batch)
        generator = torch.Generator().manual_seed(1)
        seconds = median_seconds(3 if batch >= 256 else 5, lambda: generate(policy, prompts, new_tokens, generator))
        return seconds, float(batch * new_tokens), "new tokens"
    raise SystemExit(f"vs_pytorch.py: unknown workload '{workload}'")


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    with open(sys.argv[1]) as f:
        settings = json.load(f)
    workloads = sys.argv[2:] or ["learner", "train_b64", "train_b256", "decode_b1", "decode_b8", "decode_b64",
                                 "decode_b256"]
    torch.set_num_threads(1)
    for workload in workloads:
        seconds, units, unit = run(workload, settings)
        print(json.dumps({"side": "pytorch", "workload": workload, "seconds": seconds, "units": units, "unit": unit}),
              flush=True)


if __name__ == "__main__":
    main()
