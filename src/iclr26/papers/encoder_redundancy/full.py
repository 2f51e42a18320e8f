"""Full scale: evaluation-only masked passes of the paper's released multi-encoder MLLMs on VLMEvalKit's
benchmark TSVs (card 14 section 4; audit notes/audits/14.md section 6).

Masking is zero ablation at inference, as the authors' code does it (MaoSong2022/VLMEvalKit, branch
`eagle`, commit 2e56cffc7397bd2cef27724ea8907fa7bb93a78c; the DeepSeek-VL files at 7a9cea7b:
`deepsek_vl/models/clip_encoder.py`, HybridVisionTower, sets the masked branch to zeros_like before the
aligner). Here the mask is a forward pre-hook on the model's fusion module instead of the authors'
regex rewrite of a hard-coded index, so one loaded model serves every kept subset.

Families (model.checkpoints.<name>.family):
  deepseek_vl_hybrid   transformers' DeepseekVLHybridForConditionalGeneration (SAM-B high-res + SigLIP-L
                       low-res, fused by `model.aligner(low, high)`): WIRED
  eagle, cambrian, eagle2  not in transformers: they need the authors' patched model code (pinned git
                       checkout of MaoSong2022/VLMEvalKit@2e56cff for eagle / cambrian; nvidia/Eagle2-9B's
                       trust_remote_code files at a pinned commit): NOT wired, they raise one line

One unit of work = (checkpoint, kept subset, benchmark, seed): its raw predictions are saved as JSON
lines beside the unit and scored by the scorers below (re-scorable offline).
"""
from __future__ import annotations

import json
import re
import string
from pathlib import Path

import numpy as np

from . import analysis, minimme

NOT_WIRED = {
    "eagle": "Eagle-X4/X5 masked evaluation is not wired: it needs NVlabs/Eagle's (LLaVA-based) model code as a "
             "pinned git dependency with the authors' MaskedMultiBackboneChannelConcatenationEncoder "
             "(MaoSong2022/VLMEvalKit@2e56cff vlmeval/vlm/eagle) exposing the mask as a constructor argument",
    "cambrian": "Cambrian-8B masked evaluation is not wired: it needs cambrian-mllm/cambrian's model code (pinned) "
                "with the authors' zeros_like mask before the SVA (MaoSong2022/VLMEvalKit@2e56cff "
                "cambrian/model/cambrian_arch.py:298)",
    "eagle2": "Eagle2-9B masked evaluation is not wired: it loads through trust_remote_code at a pinned commit and "
              "needs a pre-hook that zeroes the SigLIP or ConvNeXt block of its channel-concatenated features",
}


# ---------------------------------------------------------------------------------------------------
# acquire / train at full scale


def acquire_full(job) -> dict:
    """Benchmark TSVs (VLMEvalKit URLs + md5; sha256 recorded) and the snapshots of the checkpoints to
    run, at their pinned commits (refused without one)."""
    from iclr26.core.acquire import download_pinned, snapshot_model

    spec = job.cfg["data"][job.dataset]
    files = {name: download_pinned(b, job.out_dir / f"{name}.tsv") for name, b in spec["benchmarks"].items()}
    models = {}
    for name in job.cfg["model"]["run"]:
        ck = job.cfg["model"]["checkpoints"][name]
        models[name] = {"source": ck["source"], "local": True} if Path(ck["source"]).exists() else snapshot_model(ck)
    return {"source": "vlmevalkit", "files": files, "models": models}


def check_snapshots(job) -> dict:
    """Nothing is trained at full scale (the paper masks released checkpoints); train checks that every
    checkpoint to run is on disk at its pinned commit and that its family is wired."""
    from iclr26.core.acquire import model_path

    out = {}
    for name in job.cfg["model"]["run"]:
        ck = job.cfg["model"]["checkpoints"][name]
        family(ck["family"])
        out[name] = model_path(ck)
    return {"snapshots": out}


# ---------------------------------------------------------------------------------------------------
# model families


class DeepseekVLHybrid:
    """DeepSeek-VL (hybrid): SAM-B at 1024 px (high res) and SigLIP-L at 384 px (low res); masking an
    encoder replaces its features by zeros before the aligner (the authors' HybridVisionTower patch)."""

    encoders = ("sam_b_high_res", "siglip_l_low_res")

    def __init__(self, path: str, device, dtype: str = "bfloat16"):
        import torch
        from transformers import AutoProcessor, DeepseekVLHybridForConditionalGeneration

        from iclr26.core.acquire import from_pretrained

        self.torch = torch
        self.device = device
        self.processor = from_pretrained(AutoProcessor, path)
        self.processor.tokenizer.padding_side = "left"
        self.model = from_pretrained(DeepseekVLHybridForConditionalGeneration, path,
                                     dtype=getattr(torch, dtype)).to(device).eval()
        self.keep = (1, 1)
        self.model.model.aligner.register_forward_pre_hook(self._mask)

    def _mask(self, module, args):
        low, high = args   # DeepseekVLHybridAligner.forward(vision_encodings, high_res_vision_encodings)
        if not self.keep[0]:
            high = self.torch.zeros_like(high)
        if not self.keep[1]:
            low = self.torch.zeros_like(low)
        return (low, high)

    def set_keep(self, keep: tuple[int, ...]) -> None:
        self.keep = tuple(keep)

    def generate(self, images, prompts, max_new_tokens: int, sampling: dict | None, seed: int) -> list[str]:
        """images: one image or a list of images (multi-image rows) per prompt; one image placeholder
        per image, in order, before the text (VLMEvalKit's DeepSeek-VL wrapper puts the images first)."""
        per = [im if isinstance(im, list) else [im] for im in images]
        msgs = [[{"role": "user", "content": [{"type": "image"}] * len(ims) + [{"type": "text", "text": p}]}]
                for ims, p in zip(per, prompts)]
        texts = [self.processor.apply_chat_template(m, add_generation_prompt=True) for m in msgs]
        flat = [im for ims in per for im in ims]
        inputs = self.processor(images=flat, text=texts, return_tensors="pt", padding=True).to(self.device)
        inputs = {k: (v.to(self.model.dtype) if v.is_floating_point() else v) for k, v in inputs.items()}
        self.torch.manual_seed(seed)
        kw = {"do_sample": True, **sampling} if sampling else {"do_sample": False}
        with self.torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, **kw)
        return self.processor.batch_decode(out[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)


FAMILIES = {"deepseek_vl_hybrid": DeepseekVLHybrid}


def family(name: str):
    if name in FAMILIES:
        return FAMILIES[name]
    if name in NOT_WIRED:
        raise NotImplementedError(NOT_WIRED[name])
    raise ValueError(f"unknown model family {name!r} (wired: {sorted(FAMILIES)}; not wired: {sorted(NOT_WIRED)})")


# ---------------------------------------------------------------------------------------------------
# scoring: VLMEvalKit's rules re-implemented (VLMEvalKit is not a pip dependency here). Each function
# names the VLMEvalKit function it follows (open-compass/VLMEvalKit, read at 0a04a1d via the search
# index: vlmeval/smp/misc.py process_punctuation; vlmeval/dataset/utils/vqa_eval.py
# _process_digit_article, process_answer, process_line, hit_calculate, relaxed_correctness,
# anls_compute; vlmeval/dataset/utils/yorn.py YOrN_Extraction). The tests quote the cases.

_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")
_VQA_PUNCT = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!")
_COMMA_STRIP = re.compile(r"(\d)(,)(\d)")
_PERIOD_STRIP = re.compile(r"(?!<=\d)(\.)(?!\d)")   # VLMEvalKit's pattern, as written (a lookahead)
_DIGITS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
           "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}


def _norm(s: str) -> str:
    s = _PUNCT.sub(" ", str(s).lower())
    return " ".join(w for w in s.split() if w not in ("a", "an", "the"))


def process_punctuation(text: str) -> str:
    """VLMEvalKit smp.process_punctuation: each listed mark is deleted when it touches a space or the
    text has a digit-comma-digit, else replaced by a space; then periods not before a digit are
    removed (VLMEvalKit passes re.UNICODE as the count argument: at most 32 are removed)."""
    out = text
    for p in _VQA_PUNCT:
        if (p + " " in text or " " + p in text) or _COMMA_STRIP.search(text) is not None:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    return _PERIOD_STRIP.sub("", out, count=int(re.UNICODE))


def process_answer(answer: str) -> str:
    """VLMEvalKit vqa_eval.process_answer: newlines/tabs to spaces, strip, process_punctuation, then
    _process_digit_article (lower case, number words to digits, articles dropped; VLMEvalKit's
    contraction table, which only re-inserts apostrophes, e.g. dont -> don't, is not re-done)."""
    answer = str(answer).replace("\n", " ").replace("\t", " ").strip()
    words = [_DIGITS.get(w, w) for w in process_punctuation(answer).lower().split()]
    return " ".join(w for w in words if w not in ("a", "an", "the"))


def vqa_score(pred: str, answers: list[str]) -> float:
    """VLMEvalKit process_line(method='vqa_score') + hit_calculate (TextVQA): for each of the k
    accepted answers, min(1, #other answers equal to the prediction / 3); the item's score is the mean
    over the k (3 of 10 agreeing: (3 x 2/3 + 7 x 1) / 10 = 0.9)."""
    gts, p = [process_answer(a) for a in answers], process_answer(pred)
    match = [min(1.0, sum(g == p for k, g in enumerate(gts) if k != i) / 3) for i in range(len(gts))]
    return float(np.mean(match)) if match else 0.0


def exact_accuracy(pred: str, answers: list[str]) -> float:
    """VLMEvalKit process_line(method='accuracy') + hit_calculate default (GQA): mean over the accepted
    answers of (answer.strip().lower() == prediction.strip().lower())."""
    p = str(pred).strip().lower()
    return float(np.mean([str(a).strip().lower() == p for a in answers])) if answers else 0.0


def exact_processed(pred: str, answers: list[str]) -> float:
    """VLMEvalKit process_line's default branch + hit_calculate default: mean over the accepted answers
    of process_answer(answer) == process_answer(prediction) (used here for MathVista / MMMU open
    answers in place of VLMEvalKit's LLM judge)."""
    p = process_answer(pred)
    return float(np.mean([process_answer(a) == p for a in answers])) if answers else 0.0


def relaxed_correctness(target: str, prediction: str, max_relative_change: float = 0.05) -> bool:
    """VLMEvalKit vqa_eval.relaxed_correctness (pix2struct's): a text ending in % is a number / 100;
    numbers within 5% of a non-zero target are correct, else case-insensitive exact match."""
    def to_float(text: str):
        try:
            return float(text.rstrip("%")) / 100.0 if text.endswith("%") else float(text)
        except ValueError:
            return None

    prediction, target = str(prediction), str(target)
    p, t = to_float(prediction), to_float(target)
    if p is not None and t:
        return abs(p - t) / abs(t) <= max_relative_change
    return prediction.lower() == target.lower()


def relaxed(pred: str, answers: list[str], tol: float = 0.05) -> float:
    """ChartQA: VLMEvalKit process_line(method='relaxed_accuracy') + hit_calculate (max over answers);
    the prediction is only stripped."""
    return float(max((relaxed_correctness(a, str(pred).strip(), tol) for a in answers), default=False))


def anls(pred: str, answers: list[str], tau: float = 0.5) -> float:
    """DocVQA: VLMEvalKit anls_compute (Levenshtein distance / longer length, on lower-cased,
    whitespace-collapsed texts) + hit_calculate: 1 - min distance, 0 when that is below tau."""
    def lev(a, b):
        prev = list(range(len(b) + 1))
        for i, ca in enumerate(a, 1):
            cur = [i]
            for j, cb in enumerate(b, 1):
                cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
            prev = cur
        return prev[-1]

    def dist(gt, det):
        gt, det = " ".join(gt.strip().lower().split()), " ".join(det.strip().lower().split())
        n = max(len(gt), len(det))
        return 0.0 if n == 0 else lev(gt, det) / n

    if not answers:
        return 0.0
    s = 1 - min(dist(str(a), str(pred)) for a in answers)
    return 0.0 if s < tau else s


def yorn_extraction(output: str) -> str:
    """VLMEvalKit yorn.YOrN_Extraction: Yes if the words (lower case, process_punctuation) hold 'yes'
    and not 'no', No for the reverse, else Unknown."""
    words = process_punctuation(str(output).lower()).split()
    if "yes" in words and "no" not in words:
        return "Yes"
    if "yes" not in words and "no" in words:
        return "No"
    return "Unknown"


def mcq_choice(pred: str, options: dict) -> str | None:
    """The option a free-text answer names (VLMEvalKit's can_infer: a lone option letter, else a unique
    option text contained in the answer); None when it names none or several."""
    text = str(pred).strip()
    letters = [k for k in options if re.search(rf"(^|[^A-Za-z]){k}([^A-Za-z]|$)", text)]
    if len(letters) == 1:
        return letters[0]
    hits = [k for k, v in options.items() if _norm(v) and _norm(v) in _norm(text)]
    return hits[0] if len(hits) == 1 else None


def score(item: dict, pred: str, metric: str) -> float:
    """One item's score in [0, 1] under the benchmark's metric."""
    if item["type"] == "MCQ":
        return float(mcq_choice(pred, item["options"]) == item["answer"])
    answers = item["answer"]
    if metric == "anls":
        return anls(pred, answers)
    if metric == "relaxed":
        return relaxed(pred, answers)
    if metric == "contains":   # OCRBench: an accepted answer appears in the prediction
        return float(any(_norm(a) and _norm(a) in _norm(pred) for a in answers))
    if metric == "yes_no":    # MME: YOrN_Extraction(prediction) == answer ("Yes" / "No")
        return float(yorn_extraction(pred) == str(answers[0]).strip().capitalize())
    if metric == "accuracy":  # GQA
        return exact_accuracy(pred, answers)
    if metric == "exact":     # MathVista / MMMU open answers (no judge)
        return exact_processed(pred, answers)
    if metric == "vqa":       # TextVQA
        return vqa_score(pred, answers)
    raise ValueError(f"unknown metric {metric!r}")


def chance(item: dict, metric: str = "vqa") -> float:
    """Chance level of an item: 1 / #options on MCQ, 0.5 on yes/no (MME), 0 on open answers."""
    if item["type"] == "MCQ":
        return 1.0 / len(item["options"])
    return 0.5 if metric == "yes_no" else 0.0


# ---------------------------------------------------------------------------------------------------
# evaluate at full scale


def evaluate_full(job) -> dict:
    from iclr26.core.acquire import model_path
    from iclr26.core.runtime import pick_device

    from .model import keep_masks

    cfg = job.cfg
    ev = cfg["eval"]
    device = pick_device(cfg.get("device"))
    prep = job.prepared_dir("minimme")
    benches = cfg["data"]["minimme"]["benchmarks"]
    items = {b: [json.loads(line) for line in open(prep / f"{b}.jsonl")][: ev.get("max_items")] for b in benches}
    records = []
    for name in cfg["model"]["run"]:
        ck = cfg["model"]["checkpoints"][name]
        runner = family(ck["family"])(model_path(ck), device, ck.get("dtype", "bfloat16"))
        keeps = keep_masks(len(runner.encoders))

        def work(key, runner=runner, keeps=keeps):
            _, j, bench, seed = key.split("__")
            runner.set_keep(keeps[int(j)])
            rows, preds = items[bench], []
            for s in range(0, len(rows), ev["batch_size"]):
                chunk = rows[s:s + ev["batch_size"]]
                imgs = [[minimme.decode_image_file(prep / f) for f in r.get("images", [r["image"]])] for r in chunk]
                preds += runner.generate(imgs, [r["prompt"] for r in chunk], ev["max_new_tokens"],
                                         ev.get("sampling"), int(seed[1:]) * 100_003 + s)
                job.log(f"{key}: {s + len(chunk)}/{len(rows)}", every_s=60)
            with open(job.out_dir / f"{key}.jsonl", "w") as f:
                for r, p in zip(rows, preds):
                    f.write(json.dumps({"index": r["index"], "prediction": p}) + "\n")
            return {"scores": [score(r, p, benches[bench].get("metric", "vqa")) for r, p in zip(rows, preds)]}

        keys = [f"{name}__{j}__{b}__s{seed}" for seed in job.seeds for j in range(len(keeps)) for b in benches]
        done = job.units(keys, work)
        # the item categories are benchmarks; a group is the macro average over its benchmarks
        bench_of = np.concatenate([[b] * len(items[b]) for b in benches])
        ch = {b: float(np.mean([chance(r, benches[b].get("metric", "vqa")) for r in items[b]])) if items[b] else 0.0
              for b in benches}
        half = np.arange(len(bench_of)) % 2 == 0   # subset selection on even items, scored on odd items
        for seed in job.seeds:
            corr = np.array([np.concatenate([done[f"{name}__{j}__{b}__s{seed}"]["scores"] for b in benches])
                             for j in range(len(keeps))])
            # a released model's encoders see the image differently: the "asymmetric" world of the tiny design
            recs = analysis.mask_records(corr[:, ~half], bench_of[~half], corr[:, half], bench_of[half], keeps,
                                         runner.encoders, "zero", seed, ch, world="asymmetric",
                                         groups=benchmark_groups(benches))
            lohi = item_intervals(corr[:, ~half], bench_of[~half], corr[:, half], bench_of[half], keeps,
                                  runner.encoders, ch, benchmark_groups(benches), ev.get("n_boot", 1000), seed)
            for r in recs:
                if r["kind"] == "summary":
                    for m in INTERVAL_METRICS:
                        r[f"{m}_lo"], r[f"{m}_hi"] = lohi.get((r["category"], m), (NAN, NAN))
            records += [{**r, "checkpoint": name} for r in recs]
        del runner
    return {"records": records}


INTERVAL_METRICS = ("cur_max", "cur_min", "ig", "best_gain")
NAN = float("nan")


def item_intervals(test, test_cat, val, val_cat, keeps, names, chance, groups, n_boot: int = 1000,
                   seed: int = 0) -> dict[tuple[str, str], tuple[float, float]]:
    """{(group, metric): (lo, hi)}: 95% percentile bootstrap intervals over the scored items (resampled
    within each benchmark; the subset choice on the selection items stays fixed) of the summary
    metrics. One greedy pass has no seed-to-seed variation: its uncertainty is the items' (claims use
    test `fit` with these intervals)."""
    rng = np.random.default_rng(10_007 + seed)
    by = [np.flatnonzero(test_cat == c) for c in np.unique(test_cat)]
    draws: dict[tuple[str, str], list[float]] = {}
    for _ in range(n_boot):
        idx = np.concatenate([rng.choice(ix, ix.size) for ix in by])
        for r in analysis.mask_records(test[:, idx], test_cat[idx], val, val_cat, keeps, names, "zero", seed,
                                       chance, groups=groups):
            if r["kind"] == "summary":
                for m in INTERVAL_METRICS:
                    draws.setdefault((r["category"], m), []).append(r[m])
    out = {}
    for k, v in draws.items():
        v = np.asarray(v, float)
        v = v[np.isfinite(v)]
        out[k] = (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) if v.size else (NAN, NAN)
    return out


def benchmark_groups(benches: dict) -> dict[str, tuple[str, ...]]:
    """{group: benchmarks}: each benchmark alone, the paper's four groups, non-OCR and overall."""
    groups = {b: (b,) for b in benches}
    for g in ("general", "knowledge", "ocr", "vision"):
        groups[g] = tuple(b for b, spec in benches.items() if spec["group"] == g)
    groups["non_ocr"] = tuple(b for b, spec in benches.items() if spec["group"] != "ocr")
    groups["overall"] = tuple(benches)
    return {g: v for g, v in groups.items() if v}
