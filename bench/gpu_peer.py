#!/usr/bin/env python3
"""PyTorch on the GPU bench/gpu measures, the same shapes counted the same way (issue 25, item 5).

    bench/gpu_peer.py [--out FILE.json] [--quick] [--device cuda|cpu]

1. cuBLAS GEMM through torch.matmul, n^3 (n 8192; --quick 2048), fp32 (TF32 off, as usp's fp32) and bf16.
2. SDPA (torch.nn.functional.scaled_dot_product_attention, its default backend: cuDNN's fused attention
   on Hopper with PyTorch 2.5 and later), bf16, causal, 16 heads of 128, one sequence of N 16384 and 65536
   (--quick 4096), forward and backward, TFLOP/s counted as core/ops/op_kinds.c counts them: 4 x head_dim flops a
   visible query-key pair and head forward, 2.5x that backward (N (N + 1) / 2 visible pairs, causal).
3. A Hugging Face Llama at usp's llama-1b shape (Llama-3.2-1B's config.json, core/model/model_config.c),
   trained on one sequence of N 8192 and 32768 tokens (--quick 2048): bf16 autocast over fp32 master
   weights, fused AdamW, SDPA attention; where a length runs out of memory it is run again with activation
   checkpointing, and the result says so. tokens/s over 3 steps after a warm-up, and the peak memory.

Prints each figure and writes them as JSON (--out) for bench/gpu --peer, which prints usp's beside them as
ratios. Without torch, a GPU or transformers, it says what it skipped and why, and exits 0. Only this
script's own code: figures come from the installed PyTorch. --device cpu runs the same code on the CPU at
--quick's shapes (a smoke test, not a benchmark)."""
import argparse
import json
import sys
import time


def skipped(result, key, why):
    print(f"bench/gpu_peer: {key}: skipped: {why}")
    result[key] = {"skipped": why}


def timed(torch, device, fn, reps):
    """Seconds one call of fn takes: a warm-up, then the mean of reps calls between two synchronisations."""
    fn()
    sync(torch, device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(torch, device)
    return (time.perf_counter() - t0) / reps


def sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def gemm(torch, device, n, result):
    torch.backends.cuda.matmul.allow_tf32 = False  # usp's fp32 GEMM is plain fp32
    out = {"n": n}
    for name, dtype, reps in (("fp32", torch.float32, 5), ("bf16", torch.bfloat16, 10)):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        out[name + "_tflops"] = 2.0 * n ** 3 / timed(torch, device, lambda: a @ b, reps) / 1e12
        del a, b
    print(f"torch GEMM {n}^3: fp32 {out['fp32_tflops']:.1f} TFLOP/s, bf16 {out['bf16_tflops']:.1f} TFLOP/s")
    result["gemm"] = out


def attention(torch, device, lengths, result):
    import torch.nn.functional as F
    if not hasattr(F, "scaled_dot_product_attention"):
        return skipped(result, "attention", f"torch {torch.__version__} has no scaled_dot_product_attention (2.0+)")
    heads, d = 16, 128
    rows = []
    for n in lengths:
        q, k, v = (torch.randn(1, heads, n, d, device=device, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        d_o = torch.randn(1, heads, n, d, device=device, dtype=torch.bfloat16)
        flops = 4.0 * d * heads * n * (n + 1) / 2  # usp's convention (core/ops/op_kinds.c)
        reps = 1 if n > 32768 else 3
        with torch.no_grad():
            fwd = timed(torch, device, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps)

        def backward():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(d_o)
        fwd_bwd = timed(torch, device, backward, reps)  # the backward alone: forward + backward, less a forward
        row = {"n": n, "forward_tflops": flops / fwd / 1e12,
               "backward_tflops": 2.5 * flops / max(fwd_bwd - fwd, 1e-9) / 1e12}
        print(f"torch SDPA bf16 causal D {d}, {heads} heads, N {n}: forward {row['forward_tflops']:.1f} TFLOP/s, "
              f"backward {row['backward_tflops']:.1f} TFLOP/s")
        rows.append(row)
        del q, k, v, d_o
    result["attention"] = rows


def llama_1b_config(transformers):
    """usp's llama-1b preset (core/model/model_config.c), which is Llama-3.2-1B's config.json."""
    return transformers.LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
        max_position_embeddings=131072, tie_word_embeddings=True, attention_bias=False, mlp_bias=False)


def train_length(torch, device, model, opt, n, checkpointing):
    """tokens/s of n-token steps (a warm-up, then 3) and the peak memory; raises the OOM error if it occurs."""
    if checkpointing:
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    ids = torch.randint(0, model.config.vocab_size, (1, n), device=device)
    dtype = torch.bfloat16

    def step():
        with torch.autocast(device_type=device, dtype=dtype):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    seconds = timed(torch, device, step, 3)
    peak = torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else 0.0
    return {"n": n, "tokens_per_s": n / seconds, "step_s": seconds, "peak_gib": peak,
            "checkpointing": checkpointing}


def llama(torch, device, lengths, result):
    try:
        import transformers
    except ImportError as e:
        return skipped(result, "llama", f"transformers does not import ({e})")
    config = llama_1b_config(transformers)
    if device == "cpu":  # a smoke test: the same code on a model that fits a laptop
        config.num_hidden_layers, config.hidden_size, config.intermediate_size = 2, 256, 512
        config.num_attention_heads, config.num_key_value_heads, config.vocab_size = 4, 2, 1024
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(device)  # fp32 master weights
    kwargs = {"fused": True} if device == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **kwargs)
    model.train()
    rows = []
    for n in lengths:
        row = None
        for checkpointing in (False, True):
            try:
                row = train_length(torch, device, model, opt, n, checkpointing)
                break
            except torch.cuda.OutOfMemoryError:
                opt.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
        if row is None:
            print(f"torch llama-1b N {n}: out of memory even with activation checkpointing")
            rows.append({"n": n, "skipped": "out of memory with activation checkpointing"})
            continue
        print(f"torch llama-1b N {n} (bf16 autocast, fp32 master weights"
              f"{', activation checkpointing' if row['checkpointing'] else ''}): {row['tokens_per_s']:.0f} tokens/s, "
              f"{row['step_s']:.3f} s a step, peak {row['peak_gib']:.1f} GiB")
        rows.append(row)
    result["llama"] = {"transformers": transformers.__version__, "rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the figures as JSON here (for bench/gpu --peer)")
    ap.add_argument("--quick", action="store_true", help="small shapes (a check that it runs)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = ap.parse_args()
    result = {}
    try:
        import torch
    except ImportError as e:
        skipped(result, "all", f"torch does not import ({e})")
    else:
        result["torch"] = torch.__version__
        if args.device == "cuda" and not torch.cuda.is_available():
            skipped(result, "all", "torch sees no CUDA GPU")
        else:
            quick = args.quick or args.device == "cpu"
            if args.device == "cuda":
                result["device"] = torch.cuda.get_device_name(0)
                print(f"torch {torch.__version__} on {result['device']}")
            parts = (("gemm", gemm, 2048 if quick else 8192),
                     ("attention", attention, [4096] if quick else [16384, 65536]),
                     ("llama", llama, [2048] if quick else [8192, 32768]))
            for key, part, shapes in parts:
                try:  # one part's failure (an API another version lacks) leaves the others' figures
                    part(torch, args.device, shapes, result)
                except Exception as e:  # noqa: BLE001: reported, and the run goes on
                    skipped(result, key, f"failed: {type(e).__name__}: {e}")
                    if args.device == "cuda":
                        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
