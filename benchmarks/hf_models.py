"""Hugging Face ``transformers`` models we did not write: built from small configurations with random weights,
imported with ``from_torch``, lowered with ``lower(sdfg, ranks=P)``, run under ``mpiexec`` and compared
element by element with eager PyTorch.

    pip install transformers==4.57.6      # not a dependency of the package; or --path a --target folder
    python benchmarks/hf_models.py [--ranks 2] [--set text,decoder,seq2seq,vision,audio] [--only NAME,...]
                                   [--device cpu|gpu-emulated] [--schedule auto|split]

The model hub is not reachable from where this runs, and downloaded weights would not change what is
tested: the architectures' forward code is. Each model is its library's own class with 2 layers, width 32
and 4 heads (or the family's nearest small shape), on a batch of 4: token ids of length 8 from a
vocabulary of 96, or 32 x 32 images, or audio. The program returns the model's ``last_hidden_state`` (or
``logits`` for the heads), compared within rtol 1e-4 plus 1e-5 of the largest value; where that fails,
with eager PyTorch in float64, and correct if ours is within twice eager float32's own distance from it. Convolutions get
He-scaled filters and batch norms the running statistics of one pass over the input (with the library's
initialisation a deep CNN's activations vanish). ``*_mask`` cases pass an attention mask
with padded positions; ``t5`` and ``bart`` pass decoder ids too. ``--schedule split`` splits every map
whose first extent is the batch (as ``fresh_programs.py`` does) instead of ``lower(sdfg, ranks=P)``;
``--device gpu-emulated`` lowers for the GPU and runs that lowering's kernels on the host (its copies,
residency and staging as on a GPU).

Outcomes: correct, wrong, refused (a FrontendError, ScheduleError or UnsupportedPattern before any rank
ran; the reason is recorded), error (anything else, a failed rank included), and ``torch_fails`` where
``torch.onnx.export`` itself cannot trace the model. Writes ``benchmarks/results/hf_models.json``, merged by
(P, variant, name).
"""
import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "hf_models.json")
BATCH, LENGTH, VOCAB = 4, 8, 96


def _inputs(torch):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=g)
    mask = torch.ones(BATCH, LENGTH, dtype=torch.int64)
    mask[1, 5:] = 0
    mask[3, 2:] = 0
    return dict(ids=ids, mask=mask, decoder=torch.randint(0, VOCAB, (BATCH, LENGTH), generator=g),
                image=torch.randn(BATCH, 3, 32, 32, generator=g), mel=torch.randn(BATCH, 16, 16, generator=g),
                wave=torch.randn(BATCH, 400, generator=g))


def cases():
    """name -> (set, builder of the model, output attribute, input names, keyword of the second input)."""
    import transformers as T
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    text = dict(vocab_size=VOCAB, max_position_embeddings=32, **small)
    gqa = dict(text, num_key_value_heads=2)
    gpt2 = dict(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    vit = dict(image_size=32, patch_size=8, **small)
    seq2seq = dict(vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)
    h, ids, img = "last_hidden_state", ("ids", ), ("image", )
    c = {
        "bert": ("text", lambda: T.BertModel(T.BertConfig(**text)), h, ids),
        "bert_mask": ("text", lambda: T.BertModel(T.BertConfig(**text)), h, ("ids", "mask"), "attention_mask"),
        "bert_mlm": ("text", lambda: T.BertForMaskedLM(T.BertConfig(**text)), "logits", ids),
        "bert_classifier": ("text", lambda: T.BertForSequenceClassification(T.BertConfig(num_labels=3, **text)),
                            "logits", ids),
        "roberta": ("text", lambda: T.RobertaModel(T.RobertaConfig(**dict(text, max_position_embeddings=40))), h, ids),
        "distilbert": ("text", lambda: T.DistilBertModel(T.DistilBertConfig(
            vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=32)), h, ids),
        "albert": ("text", lambda: T.AlbertModel(T.AlbertConfig(embedding_size=16, **text)), h, ids),
        "electra": ("text", lambda: T.ElectraModel(T.ElectraConfig(embedding_size=16, **text)), h, ids),
        "deberta_v2": ("text", lambda: T.DebertaV2Model(T.DebertaV2Config(**text)), h, ids),
        "mpnet": ("text", lambda: T.MPNetModel(T.MPNetConfig(**dict(text, max_position_embeddings=40))), h, ids),
        "mobilebert": ("text", lambda: T.MobileBertModel(T.MobileBertConfig(
            vocab_size=VOCAB, max_position_embeddings=32, hidden_size=32, embedding_size=16, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=32, intra_bottleneck_size=16, true_hidden_size=16,
            num_feedforward_networks=1)), h, ids),
        "clip_text": ("text", lambda: T.CLIPTextModel(T.CLIPTextConfig(**text)), h, ids),
        "t5_encoder": ("text", lambda: T.T5EncoderModel(T.T5Config(
            vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)), h, ids),
        "gpt2": ("decoder", lambda: T.GPT2Model(T.GPT2Config(**gpt2)), h, ids),
        "gpt2_mask": ("decoder", lambda: T.GPT2Model(T.GPT2Config(**gpt2)), h, ("ids", "mask"), "attention_mask"),
        "gpt2_lm": ("decoder", lambda: T.GPT2LMHeadModel(T.GPT2Config(**gpt2)), "logits", ids),
        "gpt_neo": ("decoder", lambda: T.GPTNeoModel(T.GPTNeoConfig(
            vocab_size=VOCAB, max_position_embeddings=32, hidden_size=32, num_layers=2, num_heads=4,
            attention_types=[[["global", "local"], 1]], window_size=4)), h, ids),
        "gptj": ("decoder", lambda: T.GPTJModel(T.GPTJConfig(**gpt2, rotary_dim=4)), h, ids),
        "gpt_bigcode": ("decoder", lambda: T.GPTBigCodeModel(T.GPTBigCodeConfig(**gpt2)), h, ids),
        "opt": ("decoder", lambda: T.OPTModel(T.OPTConfig(
            vocab_size=VOCAB, max_position_embeddings=32, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
            num_attention_heads=4, word_embed_proj_dim=32)), h, ids),
        "bloom": ("decoder", lambda: T.BloomModel(T.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4)),
                  h, ids),
        "falcon": ("decoder", lambda: T.FalconModel(T.FalconConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)), h, ids),
        "llama": ("decoder", lambda: T.LlamaModel(T.LlamaConfig(**gqa)), h, ids),
        "llama_mask": ("decoder", lambda: T.LlamaModel(T.LlamaConfig(**gqa)), h, ("ids", "mask"), "attention_mask"),
        "llama_lm": ("decoder", lambda: T.LlamaForCausalLM(T.LlamaConfig(**gqa)), "logits", ids),
        "mistral": ("decoder", lambda: T.MistralModel(T.MistralConfig(sliding_window=None, **gqa)), h, ids),
        "mixtral": ("decoder", lambda: T.MixtralModel(T.MixtralConfig(
            num_local_experts=4, num_experts_per_tok=2, sliding_window=None, **gqa)), h, ids),
        "qwen2": ("decoder", lambda: T.Qwen2Model(T.Qwen2Config(**gqa)), h, ids),
        "phi": ("decoder", lambda: T.PhiModel(T.PhiConfig(**text)), h, ids),
        "phi3": ("decoder", lambda: T.Phi3Model(T.Phi3Config(pad_token_id=0, **gqa)), h, ids),
        "gemma": ("decoder", lambda: T.GemmaModel(T.GemmaConfig(head_dim=8, **gqa)), h, ids),
        "gemma2": ("decoder", lambda: T.Gemma2Model(T.Gemma2Config(head_dim=8, sliding_window=4, **gqa)), h, ids),
        "stablelm": ("decoder", lambda: T.StableLmModel(T.StableLmConfig(**gqa)), h, ids),
        "olmo": ("decoder", lambda: T.OlmoModel(T.OlmoConfig(pad_token_id=0, **gqa)), h, ids),
        "mamba": ("decoder", lambda: T.MambaModel(T.MambaConfig(
            vocab_size=VOCAB, hidden_size=32, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4)), h, ids),
        "t5": ("seq2seq", lambda: T.T5Model(T.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                      num_heads=4)), h, ("ids", "decoder"), "decoder_input_ids"),
        "bart": ("seq2seq", lambda: T.BartModel(T.BartConfig(max_position_embeddings=32, **seq2seq)), h,
                 ("ids", "decoder"), "decoder_input_ids"),
        "vit": ("vision", lambda: T.ViTModel(T.ViTConfig(**vit)), h, img),
        "vit_classifier": ("vision", lambda: T.ViTForImageClassification(T.ViTConfig(num_labels=10, **vit)),
                           "logits", img),
        "deit": ("vision", lambda: T.DeiTModel(T.DeiTConfig(**vit)), h, img),
        "beit": ("vision", lambda: T.BeitModel(T.BeitConfig(use_relative_position_bias=True, **vit)), h, img),
        "clip_vision": ("vision", lambda: T.CLIPVisionModel(T.CLIPVisionConfig(**vit)), h, img),
        "swin": ("vision", lambda: T.SwinModel(T.SwinConfig(
            image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4)), h, img),
        "convnext": ("vision", lambda: T.ConvNextModel(T.ConvNextConfig(
            num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], image_size=32)), h, img),
        "resnet": ("vision", lambda: T.ResNetModel(T.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic")), h, img),
        "regnet": ("vision", lambda: T.RegNetModel(T.RegNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=4)), h, img),
        "mobilenet_v2": ("vision", lambda: T.MobileNetV2Model(T.MobileNetV2Config(image_size=32, depth_multiplier=0.25)),
                         h, img),
        "efficientnet": ("vision", lambda: T.EfficientNetModel(T.EfficientNetConfig(
            image_size=32, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320)), h, img),
        "segformer": ("vision", lambda: T.SegformerModel(T.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16], patch_sizes=[7, 3],
            strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2])), h, img),
        "levit": ("vision", lambda: T.LevitModel(T.LevitConfig(
            image_size=32, hidden_sizes=[16, 32, 48], num_attention_heads=[1, 2, 3], depths=[1, 1, 1],
            key_dim=[8, 8, 8])), h, img),
        "whisper_encoder": ("audio", lambda: T.WhisperModel(T.WhisperConfig(
            num_mel_bins=16, max_source_positions=8, max_target_positions=16, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, decoder_start_token_id=1, **seq2seq)).encoder, h, ("mel", )),
        "wav2vec2": ("audio", lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
            conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4,
            do_stable_layer_norm=True, feat_extract_norm="layer")), h, ("wave", )),
    }
    return {k: v if len(v) == 5 else v + (None, ) for k, v in c.items()}


def _module(torch, model, attribute, second):
    """``forward(x)`` or ``forward(x, y)`` returning one tensor: the model's output ``attribute``."""

    class Wrapped(torch.nn.Module):

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x, y=None):
            out = self.model(x) if second is None else self.model(x, **{second: y})
            return out[0] if isinstance(out, tuple) else getattr(out, attribute)

    return Wrapped().eval()


def _calibrated(torch, model, args):
    """``model`` in eval mode with He-scaled convolution filters and its batch norms' running statistics
    those of one pass over ``args``. With the library's initialisation (filters of standard deviation 0.02,
    statistics mean 0 and variance 1) a deep CNN's activations shrink layer by layer: MobileNetV2's output
    was 1e-26, EfficientNet's 1e-34, where a comparison says nothing."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.conv._ConvNd):
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if norms:
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a cumulative average: after one pass, that pass's statistics
        model.train()
        with torch.no_grad():
            model(args[0])
    return model.eval()


def run_case(name, case, P, opts):
    import torch
    import dace_partition as dp
    from fresh_programs import _lower
    _, build, attribute, names, second = case
    torch.manual_seed(0)
    data = _inputs(torch)
    args = tuple(data[n] for n in names)
    module = _module(torch, _calibrated(torch, build(), args), attribute, second)
    with torch.no_grad():
        ref = module(*args).numpy()
    scale = float(np.max(np.abs(ref)))
    if not scale > 0:
        return {"outcome": "error", "why": "the model's output is all zeros: nothing to compare"}
    sdfg = dp.from_torch(module, args, name=f"hf_{name}_{opts.device.replace('-', '_')}_{opts.schedule}_{P}")
    _lower(sdfg, P, opts, batch=BATCH)
    kernels = dp.report(sdfg).kernels
    split = sum(1 for k in kernels if k.grid and int(np.prod(k.grid)) > 1)
    got = dp.run(sdfg, P, timeout=600, **dict(zip("xy", (a.numpy() for a in args))))
    ok = got.shape == ref.shape and np.allclose(got, ref, rtol=1e-4, atol=1e-5 * scale)
    err = float(np.max(np.abs(got - ref))) if got.shape == ref.shape else None
    extra = {}
    if not ok and err is not None:
        # float32 itself may be this far off: a deep CNN with batch norms of tiny variance amplifies
        # rounding (eager MobileNetV2 in float32 and in float64 differ by 3e-4 of the largest value)
        import copy
        with torch.no_grad():
            ref64 = _module(torch, copy.deepcopy(module.model).double(), attribute, second)(
                *(a.double() if a.is_floating_point() else a for a in args)).numpy()
        own, ours = float(np.max(np.abs(ref - ref64))), float(np.max(np.abs(got - ref64)))
        ok = ours <= 2 * own + 1e-5 * scale
        extra = {"float64": f"eager float32 is {own:.1e} from eager float64, ours {ours:.1e}"}
    return {"outcome": "correct" if ok else "wrong", "kernels": len(kernels), "split_kernels": split, **extra,
            "detail": f"max abs difference {err:.1e} of largest "
            f"{scale:.1e}, shape {tuple(got.shape)}, {split} of {len(kernels)} kernels split" if err is not None else
            f"shape {got.shape} where PyTorch gives {ref.shape}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2")
    ap.add_argument("--set", default="text,decoder,seq2seq,vision,audio")
    ap.add_argument("--only", default="")
    ap.add_argument("--path", default="", help="a folder holding transformers (pip install --target)")
    ap.add_argument("--device", choices=["cpu", "gpu-emulated"], default="cpu")
    ap.add_argument("--schedule", choices=["auto", "split"], default="auto")
    opts = ap.parse_args()
    if opts.path:
        sys.path.insert(0, opts.path)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: pip install transformers==4.57.6 (or --path FOLDER)")
        return 2
    from dace_partition.errors import FrontendError, ScheduleError, UnsupportedPattern
    from onnx_models import save, tally
    only = set(filter(None, opts.only.split(",")))
    sets = set(opts.set.split(","))
    results = {}
    if os.path.exists(OUT):
        with open(OUT) as f:
            results = json.load(f)
    for P in [int(p) for p in opts.ranks.split(",")]:
        for name, case in cases().items():
            if case[0] not in sets or (only and name not in only):
                continue
            t0 = time.time()
            try:
                res = run_case(name, case, P, opts)
            except (FrontendError, ScheduleError, UnsupportedPattern) as e:
                exporter = isinstance(e, FrontendError) and str(e).startswith("torch.onnx.export of")
                res = {"outcome": "torch_fails" if exporter else "refused", "why": str(e)[:300]}
            except Exception as e:  # noqa: BLE001 - recorded, the next model runs
                res = {"outcome": "error", "why": f"{type(e).__name__}: {str(e)[:300]}"}
            res.update(set=case[0], seconds=round(time.time() - t0, 1), transformers=transformers.__version__)
            variant = "" if (opts.device, opts.schedule) == ("cpu", "auto") else f"{opts.device}-{opts.schedule}/"
            results[f"P{P}/{variant}{name}"] = res
            print(f"P={P} {variant}{case[0]:8s} {name:16s} {res['outcome']:8s} {res['seconds']:6.1f}s "
                  f"{res.get('detail') or res.get('why', '')} {res.get('float64', '')}", flush=True)
            save(results, OUT)
    tally(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
