"""The paper's encoders at full scale (card 09, section 4; audit 09 finding 11): PANNs ResNet38
(AudioSet-pretrained, Kong et al. 2020) on PANNs' own log-mel front end, and BERT (bert-base-uncased,
its [CLS] output), each followed by a two-layer projection head to the joint embedding, as m-LTM's
ASE model (v-manhlt3/m-LTM-Audio-Text-Retrieval models/ASE_model_Maha.py, read at commit 3cb6177):
audio 2048 -> 2 d -> d, text 768 -> 2 d -> d, both L2-normalised.

ResNet38 is written here from the architecture of qiuqiangkong/audioset_tagging_cnn pytorch/models.py
(classes ConvBlock, _ResnetBasicBlock, _ResNet, ResNet38; read at commit d2f4b8c), not copied, and
no PyPI package ships it: panns-inference 0.1.1 (PyPI, last release 2023-03) ships Cnn14 and
Cnn14_DecisionLevelMax only, loads unpinned weights at run time and needs torchlibrosa + librosa.
Module names follow PANNs' so that the released checkpoint (`{'model': state_dict}`, Zenodo record
3987831, ResNet38_mAP=0.434.pth) loads key for key. As in m-LTM (and Mei et al.'s AudioEncoder it
builds on), the retrieval encoder is the trunk up to the pooled 2048-d feature (max + mean over time
of the frequency-averaged map): the checkpoint's classifier (fc1, fc_audioset) and its torchlibrosa
front end (spectrogram_extractor, logmel_extractor: fixed DFT and mel matrices) are not loaded; the
front end is recomputed with torchaudio's transforms at PANNs' settings (`PannsLogmel`).
`width` scales every channel count (64 = PANNs' ResNet38); the tests use a narrow one.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from iclr26.core.errors import DataError

# keys of the released checkpoint that the retrieval encoder does not use (m-LTM skips the same:
# every key containing 'fc' or starting with 'spec' / 'logmel')
SKIPPED = ("spectrogram_extractor.", "logmel_extractor.", "fc1.", "fc_audioset.")


class PannsLogmel(nn.Module):
    """PANNs' log-mel front end with torchaudio: periodic Hann STFT (n_fft = window), centred with
    reflect padding, power 2, librosa's default mel filters (Slaney scale and area normalisation),
    10 log10(max(power, 1e-10)), no top_db. Output (batch, 1, frames, mel_bins), PANNs' layout."""

    def __init__(self, sample_rate=32000, window_size=1024, hop_size=320, mel_bins=64, fmin=50.0, fmax=14000.0):
        super().__init__()
        import torchaudio.transforms as T

        self.mel = T.MelSpectrogram(sample_rate=sample_rate, n_fft=window_size, win_length=window_size,
                                    hop_length=hop_size, f_min=fmin, f_max=fmax, n_mels=mel_bins, power=2.0,
                                    center=True, pad_mode="reflect", norm="slaney", mel_scale="slaney")
        self.db = T.AmplitudeToDB(stype="power", top_db=None)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        with torch.autocast(wave.device.type, enabled=False):
            return self.db(self.mel(wave.float())).transpose(1, 2)[:, None]


class ConvBlock(nn.Module):
    """Two 3x3 convolutions (no bias), each with batch norm and ReLU, then average pooling."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn1, self.bn2 = nn.BatchNorm2d(c_out), nn.BatchNorm2d(c_out)

    def forward(self, x, pool=(2, 2)):
        x = F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))
        return F.avg_pool2d(x, pool)


class BasicBlock(nn.Module):
    """PANNs' residual block: a stride-2 block average-pools its input first (and its shortcut is
    pool -> 1x1 conv -> BN); conv3x3-BN-ReLU-dropout-conv3x3-BN, plus the shortcut, ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int, dropout: float):
        super().__init__()
        self.stride, self.dropout = stride, dropout
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        nn.init.zeros_(self.bn2.weight)                    # PANNs' zero-initialised residual branch
        self.downsample = None
        if stride == 2:
            self.downsample = nn.Sequential(nn.AvgPool2d(2), nn.Conv2d(c_in, c_out, 1, bias=False),
                                            nn.BatchNorm2d(c_out))
        elif c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.avg_pool2d(x, 2) if self.stride == 2 else x
        out = F.dropout(F.relu(self.bn1(self.conv1(out))), self.dropout, self.training)
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNetStages(nn.Module):
    """layer1..layer4 of [3, 4, 6, 3] basic blocks at widths w, 2w, 4w, 8w (stride 1, 2, 2, 2)."""

    def __init__(self, width: int, dropout: float, blocks=(3, 4, 6, 3)):
        super().__init__()
        c_in = width
        for i, n in enumerate(blocks):
            c_out = width * 2 ** i
            layer = [BasicBlock(c_in if j == 0 else c_out, c_out, 2 if (i and j == 0) else 1, dropout)
                     for j in range(n)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*layer))
            c_in = c_out

    def forward(self, x):
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


class ResNet38(nn.Module):
    """PANNs ResNet38 up to its pooled embedding (32 width = 2048 channels at width 64): log-mel ->
    BN over mel bins -> [SpecAugment when training] -> ConvBlock(1, w) + pool 2 -> ResNet stages ->
    pool 2 -> ConvBlock(8 w, 32 w) -> mean over frequency -> max + mean over time. Dropout
    `dropout` after each stage (PANNs 0.2) and `block_dropout` inside the residual blocks (PANNs 0.1;
    Mei et al.'s retrieval encoder, which m-LTM builds on, 0.2)."""

    def __init__(self, frontend: dict, width: int = 64, dropout: float = 0.2, block_dropout: float = 0.2,
                 spec_augment: dict | None = None):
        super().__init__()
        self.logmel = PannsLogmel(**frontend)
        mel_bins = int(frontend.get("mel_bins", 64))
        self.bn0 = nn.BatchNorm2d(mel_bins)
        self.conv_block1 = ConvBlock(1, width)
        self.resnet = ResNetStages(width, block_dropout)
        self.conv_block_after1 = ConvBlock(8 * width, 32 * width)
        self.dropout, self.out_dim = dropout, 32 * width
        self.masks = nn.ModuleList()
        if spec_augment:   # torchaudio's masking = torchlibrosa's DropStripes (width uniform in [0, param))
            import torchaudio.transforms as T

            sa = spec_augment
            self.masks.extend([T.TimeMasking(int(sa["time_drop_width"]), iid_masks=True)
                               for _ in range(int(sa["time_stripes"]))])
            self.masks.extend([T.FrequencyMasking(int(sa["freq_drop_width"]), iid_masks=True)
                               for _ in range(int(sa["freq_stripes"]))])

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        x = self.logmel(wave)                                   # (B, 1, frames, mels)
        x = self.bn0(x.transpose(1, 3)).transpose(1, 3)
        if self.training and len(self.masks):
            x = x.transpose(2, 3)                               # torchaudio masks (..., freq, time)
            for mask in self.masks:
                x = mask(x)
            x = x.transpose(2, 3)
        x = F.dropout(self.conv_block1(x, (2, 2)), self.dropout, self.training)
        x = F.dropout(F.avg_pool2d(self.resnet(x), 2), self.dropout, self.training)
        x = F.dropout(self.conv_block_after1(x, (1, 1)), self.dropout, self.training)
        x = x.mean(3)
        return x.max(2).values + x.mean(2)


def load_checkpoint(path: Path, md5: str | None) -> dict:
    """The state dict of a PANNs checkpoint ({'model': state_dict, ...}). Always torch.load with
    weights_only, which never runs code from the file: PANNs' training script also saves its sampler
    state (numpy arrays), so numpy's array and scalar constructors are allowed as well (they build
    arrays from raw bytes and nothing else; audit 2026-12-02: no weights_only=False anywhere).
    A missing, unreadable (truncated) or other file is one DataError naming the file and its pinned md5."""
    import numpy as np

    if not Path(path).is_file():
        raise DataError(f"dart: the PANNs checkpoint {path} is missing (md5 {md5}): run the acquire stage")
    # np.dtype and its classes for bool, integers, floats and complex numbers (not ObjectDType)
    numpy_arrays = [np.ndarray, np.dtype, *{type(np.dtype(code)) for code in "?bBhHiIlLqQefdgFDG"}]
    # under the names a pickle of numpy 2 (numpy._core) and of numpy 1 (numpy.core: PANNs' 2020 files) gives
    for name in ("_reconstruct", "scalar"):
        fn = getattr(np._core.multiarray, name)
        numpy_arrays += [(fn, f"numpy._core.multiarray.{name}"), (fn, f"numpy.core.multiarray.{name}")]
    try:
        with torch.serialization.safe_globals(numpy_arrays):
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:   # names an object other than tensors, numpy arrays and plain data
        # the globals the pickle names, read from its opcodes (nothing is built): say which ones
        allowed = {entry[1] if isinstance(entry, tuple) else f"{entry.__module__}.{entry.__qualname__}"
                   for entry in numpy_arrays}
        try:
            found = sorted(set(torch.serialization.get_unsafe_globals_in_checkpoint(path)) - allowed)
        except Exception:   # not a zip-format file: the names stay unknown, the refusal stands
            found = []
        raise DataError(f"dart: {Path(path).name} holds objects other than tensors, numpy arrays and plain "
                        f"data ({', '.join(found[:5]) or 'unknown'}; pinned md5 {md5}): not loaded") from None
    except (RuntimeError, EOFError, OSError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DataError(f"dart: cannot read the PANNs checkpoint {Path(path).name} (truncated or not a torch "
                        f"file? pinned md5 {md5}): {why}") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        raise DataError(f"dart: {path.name} is not a PANNs checkpoint ({{'model': state_dict}})")
    return ckpt["model"]


def load_panns(model: ResNet38, state: dict) -> list[str]:
    """Copy a PANNs ResNet38 state dict into `model`: every trunk tensor must be there with its
    shape; the checkpoint's classifier and front end are skipped (returned). One DataError naming
    what is missing, extra or of the wrong shape."""
    own = model.state_dict()
    wanted = [k for k in own if not k.startswith("logmel.") and not k.endswith("num_batches_tracked")]
    skipped = sorted(k for k in state if k.startswith(SKIPPED))
    extra = sorted(k for k in state if k not in own and not k.startswith(SKIPPED))
    missing = [k for k in wanted if k not in state]
    shapes = [f"{k} {tuple(state[k].shape)} != {tuple(own[k].shape)}" for k in wanted
              if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or extra or shapes:
        raise DataError("dart: the PANNs checkpoint does not fit ResNet38: "
                        + "; ".join(f"{what} {items[:3]}{' ...' if len(items) > 3 else ''}"
                                    for what, items in (("missing", missing), ("unexpected", extra),
                                                        ("shape", shapes)) if items))
    model.load_state_dict({**own, **{k: state[k] for k in wanted}})
    return skipped


def head(d_in: int, d: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))


class JointEncoders(nn.Module):
    """ResNet38 + BERT with m-LTM's projection heads; `enc_audio(wave)`, `enc_text(ids, mask)` ->
    unit-norm (B, d)."""

    def __init__(self, audio: ResNet38, bert: nn.Module, d: int):
        super().__init__()
        self.audio, self.bert = audio, bert
        self.audio_head = head(audio.out_dim, d)
        self.text_head = head(int(bert.config.hidden_size), d)

    def enc_audio(self, wave):
        return F.normalize(self.audio_head(self.audio(wave)).float(), dim=-1)

    def enc_text(self, ids, mask):
        cls = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        return F.normalize(self.text_head(cls).float(), dim=-1)


def build(cfg: dict, text_dir: str, checkpoint: Path | None) -> JointEncoders:
    """The joint model of a full-scale config: ResNet38 (PANNs weights from `checkpoint`), BERT from
    the local directory `text_dir` (a pinned hub snapshot or a save_pretrained folder), heads to
    model.d; both encoders frozen where model.freeze_encoders says so (m-LTM's code fine-tunes both:
    its freeze switch is training.freeze: No in settings/m-ltm-settings.yaml)."""
    from transformers import BertModel

    m = cfg["model"]
    a = m["audio"]
    audio = ResNet38(dict(a["frontend"]), int(a.get("width", 64)), float(a["dropout"]), float(a["block_dropout"]),
                     a.get("spec_augment"))
    if checkpoint is not None:
        load_panns(audio, load_checkpoint(checkpoint, cfg["data"]["clotho"]["panns"].get("md5")))
    t = cfg["text_encoder"]
    bert = BertModel.from_pretrained(text_dir, add_pooling_layer=False, hidden_dropout_prob=float(t["dropout"]),
                                     attention_probs_dropout_prob=float(t["dropout"]))
    net = JointEncoders(audio, bert, int(m["d"]))
    if m.get("freeze_encoders"):
        for p in (*net.audio.parameters(), *net.bert.parameters()):
            p.requires_grad_(False)
    return net
