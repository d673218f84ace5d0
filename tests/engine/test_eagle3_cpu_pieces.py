"""The pieces of EAGLE-3 on the CPU without a server: the seven sgl_kernel ops of the shim (in the engine's torch,
against what SGLang's Triton kernels compute for a top-k 1 chain), the torch_native patch's refusal of a tree,
and the loop target's chain (the speculators -> SGLang conversion: tests/drafter/)."""

from __future__ import annotations

import importlib.util
import subprocess

import numpy as np
import pytest

from eagle_datagen_stack.drafter_training import aux_layer_ids
from eagle_datagen_stack.sglang_engine import engine_env, engine_venv
from engine_support import engine_or_skip

from conftest import REPO

KERNELS = """
import ctypes, torch, sgl_kernel as k
# verify: two requests, chains of 3 drafts behind a root; the target accepts 2 drafts of the first, none of the second
candidates = torch.tensor([[7, 10, 11, 12], [7, 20, 21, 22]])
index = torch.arange(8).view(2, 4)
nxt = torch.tensor([[1, 2, 3, -1]] * 2)
sibling = torch.full((2, 4), -1)
target = torch.tensor([[10, 11, 99, 5], [30, 31, 32, 33]])
predicts, accept_index = torch.zeros(8, dtype=torch.long), torch.full((2, 4), -1)
accepted = torch.zeros(2, dtype=torch.long)
k.verify_tree_greedy_cpu(predicts=predicts, accept_index=accept_index, accept_token_num=accepted,
                         candidates=candidates, retrive_index=index, retrive_next_token=nxt,
                         retrive_next_sibling=sibling, target_predict=target)
assert accepted.tolist() == [2, 0], accepted
assert accept_index.tolist() == [[0, 1, 2, -1], [4, -1, -1, -1]], accept_index
assert predicts.tolist() == [10, 11, 99, 0, 30, 0, 0, 0], predicts  # accepted tokens, then the bonus
# tree: SGLang's top-k 1 chain buffers (parents -1, 0, 1; selected 0, 1, 2), a QLEN_ONLY mask
mask = torch.ones(2 * 16, dtype=torch.bool)
positions = torch.empty(8, dtype=torch.long)
retrieve = torch.full((3, 2, 4), -1, dtype=torch.long)
k.build_tree_kernel_efficient_cpu(torch.tensor([[-1, 0, 1]] * 2), torch.tensor([[0, 1, 2]] * 2), torch.tensor([5, 9]),
                                  mask, positions, retrieve[0], retrieve[1], retrieve[2], 1, 3, 4, 1)
assert positions.tolist() == [5, 6, 7, 8, 9, 10, 11, 12], positions
assert retrieve[0].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]] and retrieve[1].tolist() == [[1, 2, 3, -1]] * 2
assert (retrieve[2] == -1).all()
assert torch.equal(mask.view(2, 4, 4), torch.tril(torch.ones(4, 4, dtype=torch.bool)).expand(2, 4, 4)), mask
# bonus token and accepted slots
bonus = torch.zeros(2, dtype=torch.long)
k.fill_bonus_tokens_cpu(torch.tensor([[10, 11, 99, 0], [30, 0, 0, 0]]), torch.tensor([3, 1]), bonus, 4)
assert bonus.tolist() == [99, 30]
out = torch.full((4,), -7, dtype=torch.long)
k.fill_accept_out_cache_loc_cpu(torch.tensor([0, 1, 2, -1, 4, -1, -1, -1]), torch.arange(100, 108), out)
assert out.tolist() == [100, 101, 102, 104]
# cache slots read from req_to_token
table = torch.arange(40, dtype=torch.int32).view(4, 10)
draft = torch.empty(6, dtype=torch.long)
k.assign_draft_cache_locs_contiguous_cpu(torch.tensor([2, 0]), table, torch.tensor([4, 7]), draft, 10, 1, 3)
assert draft.tolist() == [24, 25, 26, 7, 8, 9], draft
extend = torch.empty(5, dtype=torch.long)
k.assign_extend_cache_locs_cpu(torch.tensor([1, 3]), table, torch.tensor([2, 0]), torch.tensor([4, 3]), extend, 10)
assert extend.tolist() == [12, 13, 30, 31, 32], extend
# KV rows moved in every layer's buffer, sources read before targets are written (2 -> 3 and 3 -> 2 swap)
buffers = [torch.arange(12, dtype=torch.float32).view(6, 2), torch.arange(100, 118, dtype=torch.float16).view(6, 3)]
ptrs = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
strides = torch.tensor([b.stride(0) * b.element_size() for b in buffers], dtype=torch.uint64)
k.copy_all_layer_kv_cache_cpu(ptrs, strides, torch.tensor([3, 2, 5]), torch.tensor([2, 3, 0]))
assert buffers[0][:, 0].tolist() == [0, 2, 6, 4, 8, 0] and buffers[1][:, 0].tolist() == [100, 103, 109, 106, 112, 100]
print("ok")
"""


def test_the_seven_speculative_kernels_compute_what_sglangs_triton_kernels_do():
    engine_or_skip()
    python = str(engine_venv() / "bin" / "python")
    result = subprocess.run([python, "-c", KERNELS], env=engine_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_a_speculative_servers_processes_patch_torch_native_and_refuse_a_tree():
    """sitecustomize on a speculative server's PYTHONPATH patches SGLang's modules as they are imported."""
    engine_or_skip()
    script = """
from sglang.srt.layers.attention import torch_native_backend as native
from sglang.srt.speculative.draft_utils import DraftBackendFactory
assert native.TorchNativeAttnBackend._eagle_datagen_patched and DraftBackendFactory._eagle_datagen_patched
try:
    native.TorchNativeMultiStepDraftBackend(None, 2, 3)
except NotImplementedError as exc:
    assert "top-k 1" in str(exc), exc
    print("ok")
"""
    python = str(engine_venv() / "bin" / "python")
    result = subprocess.run([python, "-c", script], env=engine_env(speculative=True), capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
    plain = subprocess.run([python, "-c", "import sys; print('sitecustomize' in sys.modules and "
                            "hasattr(sys.modules['sitecustomize'], '_PATCHES'))"], env=engine_env(),
                           capture_output=True, text=True, timeout=60)
    assert plain.stdout.strip() == "False"  # a plain server's processes are left alone


def _engine_module(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "engine" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _loop_target():
    return _engine_module("build_loop_target")


def test_loop_target_has_a_greedy_cycle_of_leads_and_samples_like_the_tiny_model():
    target, tiny = _loop_target(), _loop_target().tiny
    table, classes = target.next_token_probabilities(), target.token_classes()
    assert np.allclose(table.sum(axis=1), 1.0, atol=1e-9)
    assert table.shape[0] <= tiny.HIDDEN  # a one-hot embedding per class
    # greedy: <think> -> lead 1 -> lead 2 -> ... -> lead 0 -> lead 1, with no tie at any step
    token, path = tiny.THINK_START, []
    for _ in range(2 * target.GROUPS):
        row = table[classes[token]]
        best = np.sort(row)[-2:]
        assert best[1] > 10 * best[0], token
        token = int(np.argmax(row))
        path.append(token)
    assert path == 2 * target.greedy_cycle()
    assert len({classes[lead] for lead in target.LEADS}) == target.GROUPS  # each lead a class of its own
    # an answer begun at temperature 1 goes on greedily without a tie too: </think> -> the answer lead -> <|im_end|>
    answer = table[classes[tiny.THINK_END]]
    assert int(np.argmax(answer)) == target.ANSWER_LEAD and np.sort(answer)[-2] * 10 < answer.max()
    assert int(np.argmax(table[classes[target.ANSWER_LEAD]])) == tiny.IM_END
    # sampled, each reasoning row ends reasoning as the tiny model's does
    stock = tiny.next_token_probabilities()[tiny.THINKING]
    for row in table[: 2 * target.GROUPS]:
        assert row[tiny.THINK_END] == stock[tiny.THINK_END] and row[tiny.IM_END] == stock[tiny.IM_END]
        assert row[list(tiny.REASONING_IDS)].sum() == pytest.approx(stock[list(tiny.REASONING_IDS)].sum())


def test_loop_models_are_trained_on_answers_that_depend_on_the_prompt(tmp_path):
    from transformers import AutoTokenizer

    from eagle_datagen.standin.kimi_tokenizer import standin_tokenizer_dir

    build = _engine_module("build_loop_models")
    tokenizer = AutoTokenizer.from_pretrained(str(standin_tokenizer_dir()), trust_remote_code=True)
    target, other = build.sequences("target", tokenizer), build.sequences("other", tokenizer)
    assert len(target) == len(other) == len(build.prompt_records())
    tiny = build.tiny
    reasoning, answers = build.language(tokenizer)
    phrase_ids = [set(p) for p in (*reasoning, *answers["target"], *answers["other"])]
    assert sum(map(len, phrase_ids)) == len(set().union(*phrase_ids))  # no id in two phrases: each step is unambiguous
    same_choice = 0
    for (ours, answer), (theirs, their_answer) in zip(target, other, strict=True):
        prompt = ours[: len(ours) - answer]
        assert theirs[: len(theirs) - their_answer] == prompt  # the same rendered prompt, another model's answer
        assert prompt[-1] == tiny.THINK_START and ours[-1] == theirs[-1] == tiny.IM_END
        mine, yours = ours[len(prompt):], theirs[len(prompt):]
        assert mine.count(tiny.THINK_END) == yours.count(tiny.THINK_END) == 1
        assert mine[mine.index(tiny.THINK_END):] != yours[yours.index(tiny.THINK_END):]  # another model's answer
        same_choice += mine[: mine.index(tiny.THINK_END)] == yours[: yours.index(tiny.THINK_END)]
        assert tokenizer.decode(mine[: mine.index(tiny.THINK_END)]).strip()  # text from the demo prompts
    assert same_choice < len(target) // 4  # the other model reasons in the same phrases but mostly picks others
    chosen = {tuple(ids[len(ids) - n:]) for ids, n in target}
    assert len(chosen) == build.PHRASES  # the prompt picks the answer: every phrase is some prompt's answer
    config = build.model_config()
    assert config["vocab_size"] == 163_840 and config["num_hidden_layers"] >= 4  # 3 aux ids valid in both conventions
    assert config["torch_dtype"] == "float32"


def test_aux_layer_ids_are_capturable_in_both_conventions():
    assert aux_layer_ids(4) == [1, 2, 3]  # SGLang 0, 1, 2: never the last layer's output (id 4)
    assert aux_layer_ids(61) == [1, 30, 60]
    assert aux_layer_ids(2) == [0, 1]
