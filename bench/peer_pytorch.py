#!/usr/bin/python3
"""usp's peer on the CPU: the same Llama-style model trained with Ulysses
sequence parallelism in PyTorch + gloo, one process per rank (bench/peer.sh).

Each rank holds N/P consecutive tokens with all heads; an all-to-all gives it
all N tokens for H/P heads, a blockwise causal attention runs there (query
blocks of 512 against the keys up to the block's end: the N x N score matrix
never exists at once in the forward pass), and a second all-to-all brings the
output back. Both all-to-alls are autograd functions whose backward is the
reverse all-to-all. Gradients are summed over the ranks (each rank's loss is
its share of the sequence's mean), then AdamW steps.

Modes:
  --check DIR   load DIR/model.safetensors (a usp checkpoint, Hugging Face
                Llama names) and print the loss of the one sequence of --data:
                bench/peer.sh compares it with `usp eval` on the same file.
  (default)     train --steps steps from seeded weights; rank 0 prints one
                JSON line with every step's wall seconds.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

BLOCK = 512


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"peer_pytorch: {path}: tensor {name} is {t['dtype']}, expected F32")
        b, e = t["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(t["shape"])
    return tensors


def init_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    C, F_, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = C // H

    def normal(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    w = {"model.embed_tokens.weight": normal(V, C), "model.norm.weight": torch.ones(C)}
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = torch.ones(C)
        w[p + "post_attention_layernorm.weight"] = torch.ones(C)
        w[p + "self_attn.q_proj.weight"] = normal(H * D, C)
        w[p + "self_attn.k_proj.weight"] = normal(Hkv * D, C)
        w[p + "self_attn.v_proj.weight"] = normal(Hkv * D, C)
        w[p + "self_attn.o_proj.weight"] = normal(C, H * D)
        w[p + "mlp.gate_proj.weight"] = normal(F_, C)
        w[p + "mlp.up_proj.weight"] = normal(F_, C)
        w[p + "mlp.down_proj.weight"] = normal(C, F_)
    return w


class AllToAll(torch.autograd.Function):
    """all_to_all_single along dim 0; its gradient is the same exchange back."""

    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()  # first: empty_like keeps a permuted tensor's strides, the exchange writes rows
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)
        return out

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        out = torch.empty_like(g)
        dist.all_to_all_single(out, g)
        return out


def seq_to_heads(x, P):
    """[n, h, D] on each rank (its tokens, all heads) -> [P n, h/P, D] (all tokens, its heads)."""
    n, h, D = x.shape
    x = x.view(n, P, h // P, D).permute(1, 0, 2, 3)
    return AllToAll.apply(x).reshape(P * n, h // P, D)


def heads_to_seq(x, P):
    """[P n, h/P, D] -> [n, h, D]: the inverse of seq_to_heads."""
    N, hp, D = x.shape
    x = AllToAll.apply(x.view(P, N // P, hp, D))
    return x.permute(1, 0, 2, 3).reshape(N // P, P * hp, D)


def rope(x, positions, theta):
    """Hugging Face Llama's rotate_half: dims j and j + D/2 pair; angles in float64."""
    D = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2.0 / D)
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos, sin = angle.cos().float()[:, None, :], angle.sin().float()[:, None, :]
    a, b = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def causal_attention(q, k, v, scale):
    """Blockwise causal softmax attention over [N, h, D]: query block i sees keys < its end."""
    N = q.shape[0]
    q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [h, N, D]
    out = []
    for s in range(0, N, BLOCK):
        e = min(s + BLOCK, N)
        scores = torch.matmul(q[:, s:e], k[:, :e].transpose(1, 2)) * scale
        mask = torch.arange(s, e)[:, None] < torch.arange(0, e)[None, :]
        scores = scores.masked_fill(mask, float("-inf"))
        out.append(torch.matmul(torch.softmax(scores, dim=-1), v[:, :e]))
    return torch.cat(out, dim=1).transpose(0, 1)


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def loss_of(w, cfg, tokens, targets, positions, P, N):
    C, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D, eps, theta = C // H, cfg["rms_norm_eps"], cfg["rope_theta"]
    n = tokens.shape[0]
    x = w["model.embed_tokens.weight"][tokens]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = rope((h @ w[p + "self_attn.q_proj.weight"].t()).view(n, H, D), positions, theta)
        k = rope((h @ w[p + "self_attn.k_proj.weight"].t()).view(n, Hkv, D), positions, theta)
        v = (h @ w[p + "self_attn.v_proj.weight"].t()).view(n, Hkv, D)
        if Hkv != H:  # GQA: each kv head serves H / Hkv query heads
            k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
        o = causal_attention(seq_to_heads(q, P), seq_to_heads(k, P), seq_to_heads(v, P), 1.0 / math.sqrt(D))
        x = x + heads_to_seq(o, P).reshape(n, H * D) @ w[p + "self_attn.o_proj.weight"].t()
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].t(), h @ w[p + "mlp.up_proj.weight"].t()
        x = x + (F.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].t()
    x = rmsnorm(x, w["model.norm.weight"], eps)
    logits = x @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).t()
    return F.cross_entropy(logits, targets, reduction="sum") / N  # this rank's share of the mean


def rank_main(rank, args, cfg, data):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    P, N = args.ranks, args.seq
    n = N // P
    positions = torch.arange(rank * n, (rank + 1) * n)
    tokens, targets = data[rank * n : (rank + 1) * n].long(), data[rank * n + 1 : (rank + 1) * n + 1].long()
    if args.check:
        w = load_safetensors(os.path.join(args.check, "model.safetensors"))
        with torch.no_grad():
            loss = loss_of(w, cfg, tokens, targets, positions, P, N)
        dist.all_reduce(loss)
        if rank == 0:
            print(json.dumps({"loss": loss.item()}))
        dist.destroy_process_group()
        return
    w = {k: t.requires_grad_() for k, t in init_weights(cfg, 1234).items()}
    opt = torch.optim.AdamW(list(w.values()), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    times, losses = [], []
    for _ in range(args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_of(w, cfg, tokens, targets, positions, P, N)
        loss.backward()
        for t in w.values():
            dist.all_reduce(t.grad)
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        dist.barrier()
        times.append(time.perf_counter() - t0)
        losses.append(total.item())
    if rank == 0:
        print(json.dumps({"step_s": times, "loss": losses}))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="a Hugging Face Llama config.json")
    ap.add_argument("--data", required=True, help="a file of seq + 1 bytes (tokens, vocabulary 256)")
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--check", help="a usp checkpoint directory: print its loss on --data instead of training")
    ap.add_argument("--port", type=int, default=29517)
    args = ap.parse_args()
    cfg = json.load(open(args.config))
    data = torch.tensor(list(open(args.data, "rb").read()[: args.seq + 1]), dtype=torch.int32)
    if args.seq % args.ranks or cfg["num_attention_heads"] % args.ranks or data.numel() < args.seq + 1:
        sys.exit("peer_pytorch: --seq and the heads must divide by --ranks, and --data hold --seq + 1 bytes")
    mp.spawn(rank_main, args=(args, cfg, data), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
