"""Early fusion, scaled down (card 19, section 6.2): a discrete image tokenizer and the arms' token
sequences.

Image tokenizer: vector quantisation of fixed patches. An image is resized (box filter, the whole
picture kept: no crop, whatever its aspect) to a grid of `patches` (an int: square grid, or
[rows, cols]) patches of `pool` x `pool` pixels; each patch's RGB values are replaced by the index
of its nearest centroid in a codebook learned by k-means (scikit-learn) on training patches. This is
Anole's/Chameleon's scheme (a VQ codebook, one token per patch, <boi> ... <eoi> around the image)
with the encoder reduced to pooling: a learned VQ-VAE encoder would be the cost of the whole tiny
budget, and the rendered scenes have few distinct patch kinds, which k-means recovers; the codebook
is fitted on training images only (no test image, no generator state).

Arms, from the same row: the prompt is the question with its problem image(s); then
  answer_only   ANSWER : <final answer> <eos>
  text_trace    the trace's thoughts with their reasoning images removed, then the answer (the
                card's "no visual chain" arm: the thoughts restate the operations, no state)
  text_cot      our text chain of thought: each reasoning image is replaced by the same state in
                words, the count of every image-code kind in that picture ("state : k0 2 k1 0 ...",
                read from the image's VQ codes, so it exists for real rows too); the visual-vs-text
                ablation (ours, not in the paper)
  interleaved   the trace's thoughts with each reasoning image's tokens in place, then the answer
The loss is on every token after the prompt (for interleaved this includes image tokens: the
analogue of Bagel-Zebra-CoT's image-token loss). Scaffolding gives the first k gold steps (thought
and image, or thought and state words, or thought alone) in the prompt.
"""
from __future__ import annotations

import re

import numpy as np

BOI, EOI, ANSWER, STATE = "<boi>", "<eoi>", "ANSWER", "state"
ARMS = ("answer_only", "text_trace", "text_cot", "interleaved")
CHAIN_ARMS = ("text_trace", "text_cot", "interleaved")
WORD = re.compile(r"\w+|[^\w\s]")
STATE_ALL_CODES = 16   # a codebook up to this size is stated in full (fixed-length text); larger: codes present


def words(text: str) -> list[str]:
    return WORD.findall(text)


def code_word(i: int) -> str:
    return f"<img_{i}>"


# ----------------------------------------------------------------------------- image VQ
def patch_grid(patches) -> tuple[int, int]:
    return (int(patches), int(patches)) if np.isscalar(patches) else (int(patches[0]), int(patches[1]))


def patch_features(image: np.ndarray, patches, pool: int) -> np.ndarray:
    """(rows x cols, pool^2 x 3) features: the image box-resized to (rows x pool, cols x pool) pixels
    (every pixel kept, aspect not preserved), cut into its patches, scaled to [0, 1]."""
    from PIL import Image

    rows, cols = patch_grid(patches)
    small = Image.fromarray(np.ascontiguousarray(image)).resize((cols * pool, rows * pool), Image.Resampling.BOX)
    arr = np.asarray(small, dtype=np.float32) / 255.0
    grid = arr.reshape(rows, pool, cols, pool, 3).transpose(0, 2, 1, 3, 4)
    return grid.reshape(rows * cols, pool * pool * 3)


def fit_codebook(images: list[np.ndarray], spec: dict, seed: int) -> np.ndarray:
    """k-means centroids (codebook x features) of the training images' patches."""
    from sklearn.cluster import KMeans

    feats = np.concatenate([patch_features(im, spec["patches"], int(spec["pool"])) for im in images])
    feats = np.unique(np.round(feats, 3), axis=0)   # rendered scenes repeat patches exactly
    k = min(int(spec["codebook"]), len(feats))
    km = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(feats)
    return km.cluster_centers_.astype(np.float32)


def encode_image(image: np.ndarray, codebook: np.ndarray, spec: dict) -> list[int]:
    feats = patch_features(image, spec["patches"], int(spec["pool"]))
    return np.argmin(((feats[:, None, :] - codebook[None]) ** 2).sum(-1), axis=1).tolist()


# ----------------------------------------------------------------------------- sequences
def image_words(codes: list[int]) -> list[str]:
    return [BOI, *map(code_word, codes), EOI]


def state_words(codes: list[int], codebook_size: int) -> list[str]:
    """The picture's state in words: how many patches of each code kind it has."""
    counts = np.bincount(np.asarray(codes, dtype=np.int64), minlength=codebook_size)
    kinds = range(codebook_size) if codebook_size <= STATE_ALL_CODES else np.flatnonzero(counts)
    return [STATE, ":", *(w for c in kinds for w in (f"k{c}", str(int(counts[c]))))]


def example(prompt: list, chain: list, answer: str, codes: dict, codebook_size: int) -> dict:
    """Word lists of one row: prompt, the chain's steps (each: the text before an image, the image
    and its state in words; the last step may have no image), and the answer suffix."""
    def piece(kind, value):
        return image_words(codes[value]) if kind == "image" else words(value)

    steps, text = [], []
    for kind, value in chain:
        if kind == "text":
            text += words(value)
        else:
            steps.append({"text": text, "image": image_words(codes[value]),
                          "state": state_words(codes[value], codebook_size), "column": value})
            text = []
    return {"prompt": [w for kind, value in prompt for w in piece(kind, value)],
            "steps": steps, "tail": text, "answer": [ANSWER, ":", *words(answer)]}


def question_key(ex: dict) -> str:
    """The question's words without its images (what the question-only lookup baseline sees)."""
    return " ".join(w for w in ex["prompt"] if not (w.startswith("<img_") or w in (BOI, EOI)))


def target(ex: dict, arm: str, given: int = 0) -> tuple[list[str], list[str]]:
    """(prompt words, target words) of an arm; `given` gold steps move into the prompt."""
    if arm == "answer_only":
        return list(ex["prompt"]), list(ex["answer"])
    extra = {"interleaved": "image", "text_cot": "state"}.get(arm)
    chain = [step["text"] + (step[extra] if extra else []) for step in ex["steps"]]
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
