"""Early fusion, scaled down (card 19, section 6.2): a discrete image tokenizer and the three arms'
token sequences.

Image tokenizer: vector quantisation of fixed patches. An image is resized to a `patches` x
`patches` grid of square patches; each patch, average-pooled to `pool` x `pool` RGB, is replaced by
the index of its nearest centroid in a codebook learned by k-means (scikit-learn) on training
patches. This is Anole's/Chameleon's scheme (a VQ codebook, one token per patch, <boi> ... <eoi>
around the image) with the encoder reduced to pooling: a learned VQ-VAE encoder would be the cost
of the whole tiny budget, and the rendered scenes have few distinct patch kinds, which k-means
recovers; the codebook is fitted on training images only (no test image, no generator state).

Arms (card 6.3), from the same row: the prompt is the question with its problem image(s); then
  answer_only   ANSWER : <final answer> <eos>
  text_trace    the trace's text with its reasoning images removed, then the answer
  interleaved   the trace's text with each reasoning image's tokens in place, then the answer
The loss is on every token after the prompt (for interleaved this includes image tokens: the
analogue of Bagel-Zebra-CoT's image-token loss). Scaffolding gives the first k gold (thought,
image) steps in the prompt.
"""
from __future__ import annotations

import re

import numpy as np

BOI, EOI, ANSWER = "<boi>", "<eoi>", "ANSWER"
ARMS = ("answer_only", "text_trace", "interleaved")
WORD = re.compile(r"\w+|[^\w\s]")


def words(text: str) -> list[str]:
    return WORD.findall(text)


def code_word(i: int) -> str:
    return f"<img_{i}>"


# ----------------------------------------------------------------------------- image VQ
def patch_features(image: np.ndarray, patches: int, pool: int) -> np.ndarray:
    """(patches^2, pool^2 x 3) features: the image cut into a patches x patches grid (cropped to a
    multiple of the grid), each patch average-pooled to pool x pool, scaled to [0, 1]."""
    h, w = image.shape[:2]
    side = min(h, w) // (patches * pool) * pool
    if side == 0:
        raise ValueError(f"image {h}x{w} is smaller than {patches * pool} px")
    crop = image[: side * patches, : side * patches].astype(np.float32) / 255.0
    step = side // pool
    pooled = crop.reshape(patches * pool, step, patches * pool, step, 3).mean(axis=(1, 3))
    grid = pooled.reshape(patches, pool, patches, pool, 3).transpose(0, 2, 1, 3, 4)
    return grid.reshape(patches * patches, pool * pool * 3)


def fit_codebook(images: list[np.ndarray], spec: dict, seed: int) -> np.ndarray:
    """k-means centroids (codebook x features) of the training images' patches."""
    from sklearn.cluster import KMeans

    feats = np.concatenate([patch_features(im, int(spec["patches"]), int(spec["pool"])) for im in images])
    feats = np.unique(np.round(feats, 3), axis=0)   # rendered scenes repeat patches exactly
    k = min(int(spec["codebook"]), len(feats))
    km = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(feats)
    return km.cluster_centers_.astype(np.float32)


def encode_image(image: np.ndarray, codebook: np.ndarray, spec: dict) -> list[int]:
    feats = patch_features(image, int(spec["patches"]), int(spec["pool"]))
    return np.argmin(((feats[:, None, :] - codebook[None]) ** 2).sum(-1), axis=1).tolist()


# ----------------------------------------------------------------------------- sequences
def image_words(codes: list[int]) -> list[str]:
    return [BOI, *map(code_word, codes), EOI]


def example(prompt: list, chain: list, answer: str, codes: dict) -> dict:
    """Word lists of one row: prompt, the chain's steps (each: the text before an image and the
    image, the last step may have no image), and the answer suffix."""
    def piece(kind, value):
        return image_words(codes[value]) if kind == "image" else words(value)

    steps, text = [], []
    for kind, value in chain:
        if kind == "text":
            text += words(value)
        else:
            steps.append({"text": text, "image": image_words(codes[value]), "column": value})
            text = []
    return {"prompt": [w for kind, value in prompt for w in piece(kind, value)],
            "steps": steps, "tail": text, "answer": [ANSWER, ":", *words(answer)]}


def target(ex: dict, arm: str, given: int = 0) -> tuple[list[str], list[str]]:
    """(prompt words, target words) of an arm; `given` gold (thought, image) steps move into the prompt."""
    if arm == "answer_only":
        return list(ex["prompt"]), list(ex["answer"])
    chain = []
    for step in ex["steps"]:
        chain.append(step["text"] + (step["image"] if arm == "interleaved" else []))
    chain.append(ex["tail"])
    head = [w for part in chain[:given] for w in part]
    rest = [w for part in chain[given:] for w in part]
    return ex["prompt"] + head, rest + ex["answer"]


def parse(generated: list[str]) -> dict:
    """The answer (words after the last `ANSWER :`) and the generated images (code lists) of an output."""
    images, current = [], None
    for w in generated:
        if w == BOI:
            current = []
        elif w == EOI and current is not None:
            images.append(current)
            current = None
        elif current is not None:
            current.append(w)
    answer = None
    for i in range(len(generated) - 1):
        if generated[i] == ANSWER and generated[i + 1] == ":":
            answer = " ".join(generated[i + 2:])
    return {"answer": answer, "images": images}
