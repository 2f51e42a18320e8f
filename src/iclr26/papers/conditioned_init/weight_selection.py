"""Weight selection (Xu et al., ICLR 2024, "Initializing Models with Larger Ones"): a baseline init
named in the paper's abstract. A small model is initialised from a larger pretrained teacher of
the same family by selecting a subset of its weights; nothing is trained for it, except the teacher.

The method, as the official code does it (github OscarXZQ/weight-selection, weight_selection.py,
read, not copied):
  layer selection    first-N: student layer i takes teacher layer i (parameters matched by name,
                     so a student with fewer layers takes the teacher's first ones);
  element selection  uniform: along every dimension where the teacher is larger, keep evenly spaced
                     indices (every (n_t / n_s)-th one when it divides, else rounded linspace);
  the head           (the classifier) is not selected: it keeps the student's default init.
Every other parameter (patch embedding, CLS and position embeddings, LayerNorms, Q/K/V/O, MLP)
is selected. When the teacher's size is not a multiple of the student's, we take rounded
`linspace(0, n_t - 1, n_s)` (the tiny and full teachers here are exactly 2x wide, so this branch
never runs on them).

The teacher. The paper selects from a public checkpoint pretrained on a larger dataset. Here the
teacher is a wider ViT of the same depth (`weight_selection.teacher` in the config) trained first,
by this job, on the same seed's training pool in another order (regime `teacher`), one teacher per
seed so that seeds stay independent replicates: a same-data teacher, printed as a deviation in the
config. It runs at smoke and full scale; tiny scale does not run weight selection (budget).
"""
from __future__ import annotations

import torch

HEAD_KEYS = ("classifier",)  # transformers' name of the ViT head; the official code skips keys with "head"


def uniform_indices(n_teacher: int, n_student: int) -> torch.Tensor:
    """Evenly spaced indices of n_student out of n_teacher (all of them when equal)."""
    if n_teacher < n_student:
        raise ValueError(f"the teacher ({n_teacher}) is smaller than the student ({n_student}) along a dimension")
    if n_teacher % n_student == 0:
        return torch.arange(n_student) * (n_teacher // n_student)
    return torch.round(torch.linspace(0, n_teacher - 1, n_student)).long()


def uniform_element_selection(teacher: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The student-shaped subset of a teacher tensor: uniform indices along every dimension."""
    if teacher.dim() != len(shape):
        raise ValueError(f"teacher tensor of shape {tuple(teacher.shape)} cannot give shape {tuple(shape)}")
    selected = teacher
    for dim, size in enumerate(shape):
        selected = torch.index_select(selected, dim, uniform_indices(teacher.shape[dim], size))
    return selected.clone()


def select_weights(teacher_state: dict, student_state: dict, skip=HEAD_KEYS) -> dict:
    """The student's state dict with every non-head entry selected from the teacher's (by name)."""
    selected = {}
    for key, value in student_state.items():
        if any(part in key for part in skip):
            selected[key] = value
            continue
        if key not in teacher_state:
            raise KeyError(f"weight selection: the teacher has no {key!r} (is it shallower than the student?)")
        selected[key] = uniform_element_selection(teacher_state[key], tuple(value.shape)).to(value.dtype)
    return selected


def teacher_model_config(model_cfg: dict, teacher_cfg: dict) -> dict:
    """The teacher's model config: the student's, with the teacher's widths (`teacher.config`)."""
    return {**model_cfg, "config": {**(model_cfg.get("config") or {}), **teacher_cfg["config"]}}
