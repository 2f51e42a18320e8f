"""Full scale: MovieNet key frames -> per-shot key-frame features, with a pinned torchvision ResNet-50.

The encoder is torchvision's resnet50 with the IMAGENET1K_V2 weights, loaded from the file that
acquire downloaded with core.acquire (url and sha256 in the config; torchvision's own metadata names
the url, and the first 8 hex digits of the sha256 are in its file name, which torchvision's loader
checks: pin_matches_url checks the same here). The classifier is dropped (fc = Identity): each key
frame gives the 2048-d average-pooled feature. Pre-processing is BaSSL's test transform
(finetune/cfg/default.yaml TEST.TRANSFORM: resize 256, centre crop 224, ImageNet mean and std).

This encoder is frozen and pretrained on ImageNet (supervised), not BaSSL's self-supervised
end-to-end shot encoder: the full rows are an MLP shot encoder + CRN trained on frozen ImageNet
features (printed in the full config).

Frames: MovieNet's 240P key frames as BaSSL's download script unpacks them,
<frames_dir>/<video_id>/shot_<shot_id:04d>_img_<k>.jpg, k = 0, 1, 2.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

HASH_IN_NAME = re.compile(r"-([a-f0-9]{8,})\.")   # torchvision's file-name hash (torch.hub.HASH_REGEX)


def pin_matches_url(url: str, sha256: str) -> bool:
    """The pinned sha256 starts with the hash prefix torchvision writes into the weights' file name."""
    found = HASH_IN_NAME.search(url.rsplit("/", 1)[-1])
    return bool(found) and sha256.startswith(found.group(1))


def load_encoder(weights: Path, device: str):
    import torch
    from torchvision.models import resnet50

    with torch.device("meta"):   # the architecture only; every tensor comes from the pinned file
        model = resnet50(weights=None)
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True), assign=True)
    model.fc = torch.nn.Identity()
    return model.eval().to(device)


def transform(spec: dict):
    from torchvision import transforms

    return transforms.Compose([transforms.Resize(spec["resize"]), transforms.CenterCrop(spec["crop"]),
                               transforms.ToTensor(),
                               transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def frame_paths(frames_dir: Path, vid: str, num_shot: int, keyframes: int = 3) -> list[Path]:
    paths = [Path(frames_dir) / vid / f"shot_{i:04d}_img_{k}.jpg" for i in range(num_shot) for k in range(keyframes)]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{vid}: {len(missing)} of {len(paths)} key frames missing, e.g. {missing[0]}")
    return paths


class _Frames:
    def __init__(self, paths, tf):
        self.paths, self.tf = paths, tf

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from PIL import Image

        with Image.open(self.paths[i]) as im:
            return self.tf(im.convert("RGB"))


def extract_movie(model, frames_dir: Path, vid: str, num_shot: int, spec: dict, device: str) -> np.ndarray:
    """(num_shot, 3, 2048) float16 features of one movie's key frames."""
    import torch

    paths = frame_paths(frames_dir, vid, num_shot)
    loader = torch.utils.data.DataLoader(_Frames(paths, transform(spec)), batch_size=spec["batch"],
                                         num_workers=spec["workers"], shuffle=False)
    out = []
    with torch.no_grad():
        for x in loader:
            out.append(model(x.to(device)).float().cpu().numpy())
    return np.concatenate(out).reshape(num_shot, 3, -1).astype(np.float16)


def save_features(path: Path, feats: np.ndarray) -> None:
    """np.save through core.io.atomic_path (a killed job leaves no half file)."""
    from iclr26.core.io import atomic_path

    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        np.save(handle, feats)
