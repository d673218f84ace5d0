"""The seven CPU kernels SGLang 0.5.23's EAGLE-3 path calls, in plain torch (test support only).

With `--speculative-algorithm EAGLE3` on the CPU engine, SGLang calls these `sgl_kernel` CPU ops (the real ones are
C++ in a CPU build of sgl-kernel that PyPI does not have). Each is a line-by-line reading of the Triton kernel
SGLang uses on a GPU for the same job (named below), over small Python loops: the batches here are a few requests of a
few tokens, so clarity beats speed. The CPU loop (docs/internals/evaluation-cpu-loop.md) serves a drafter with top-k 1,
which is the path these were checked on; the tree kernels are written for any top-k, as their Triton originals are.
"""

from __future__ import annotations

import ctypes

import torch


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc) -> None:
    """Copy KV rows src_loc -> tgt_loc in every layer's buffer (Triton: copy_all_layer_kv_cache_tiled).

    `data_ptrs[b]` is buffer b's address and `strides[b]` its row size in bytes; like the Triton kernel (all loads,
    then all stores) every source row is read before any target row is written, so overlapping sets are safe.
    """
    sources, targets = src_loc.tolist(), tgt_loc.tolist()
    for base, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        rows = [ctypes.string_at(base + source * stride, stride) for source in sources]
        for target, row in zip(targets, rows, strict=True):
            ctypes.memmove(base + target * stride, row, stride)


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride: int) -> None:
    """bonus_tokens[i] = the last accepted token of request i (Triton: fill_bonus_tokens)."""
    rows = torch.arange(accept_lens.shape[0], dtype=torch.int64, device=accept_lens.device)
    flat = rows * accept_stride + accept_lens.to(torch.int64) - 1
    bonus_tokens.copy_(accept_tokens.reshape(-1)[flat].to(bonus_tokens.dtype))


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc) -> None:
    """Pack the cache slots of the accepted draft positions, in order, skipping -1 (Triton:
    fill_accept_out_cache_loc)."""
    index = accept_index.reshape(-1)
    accepted = index[index != -1].to(torch.int64)
    accept_out_cache_loc[: accepted.shape[0]] = out_cache_loc[accepted].to(accept_out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len: int,
                                           topk: int, num_cols: int) -> None:
    """out_cache_loc[i * topk * num_cols:][:topk * num_cols] = request i's slots from seq_lens[i] on
    (Triton: assign_draft_cache_locs_contiguous)."""
    del pool_len  # the row length; torch indexing knows it
    width = topk * num_cols
    for i, (row, start) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist(), strict=True)):
        out_cache_loc[i * width : (i + 1) * width] = req_to_token[row, start : start + width].to(out_cache_loc.dtype)


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc,
                                 pool_len: int) -> None:
    """Concatenate req_to_token[row_i, start_i:end_i] over the requests into out_cache_loc (Triton:
    assign_extend_cache_locs)."""
    del pool_len
    taken = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True):
        count = end - start
        out_cache_loc[taken : taken + count] = req_to_token[row, start:end].to(out_cache_loc.dtype)
        taken += count


def _parent_position(selected: list[int], parent_token: int, upto: int) -> int | None:
    """The first draft position whose selected index is parent_token (None when absent)."""
    for position in range(upto):
        if selected[position] == parent_token:
            return position
    return None


def build_tree_kernel_efficient_cpu(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                                    retrieve_index, retrieve_next_token, retrieve_next_sibling, topk: int,
                                    depth: int, draft_token_num: int, tree_mask_mode: int) -> None:
    """The draft tree's mask, positions and retrieve links (Triton: sgl_build_tree_kernel_efficient_triton).

    tree_mask_mode 0 is FULL_MASK (each draft row spans the prefix and the draft tokens), 1 is QLEN_ONLY (a
    draft_token_num x draft_token_num block per request: what SGLang picks on the CPU); 2 (bit-packed) is refused,
    as by the Triton version. retrieve_* arrive filled with -1.
    """
    if int(tree_mask_mode) == 2:
        raise NotImplementedError("QLEN_ONLY_BITPACKING tree masks are not supported by the CPU stand-in")
    n = draft_token_num
    seq_lens = verified_seq_len.tolist()
    parents = parent_list.reshape(len(seq_lens), -1).tolist() if parent_list.numel() else [[] for _ in seq_lens]
    selected_rows = selected_index.reshape(len(seq_lens), -1).tolist()
    flat_mask = tree_mask.view(-1)
    flat_positions = positions.view(-1)
    flat_index, flat_next, flat_sibling = (t.view(-1) for t in (retrieve_index, retrieve_next_token,
                                                                 retrieve_next_sibling))
    prefix_sum = 0
    for b, seq_len in enumerate(seq_lens):
        selected, parent_row = selected_rows[b], parents[b]
        seq_tree_idx = n * n * b + prefix_sum * n
        flat_positions[b * n] = seq_len
        for i in range(n - 1, 0, -1):
            flat_index[b * n + i] = b * n + i
            parent_tb = selected[i - 1] // topk
            position = 0 if parent_tb == 0 else _parent_position(selected, parent_row[parent_tb], n - 1)
            if parent_tb != 0 and position is not None:
                position += 1
            if position is not None:
                next_token = int(flat_next[b * n + position])
                flat_next[b * n + position] = i
                if next_token != -1:
                    flat_sibling[b * n + i] = next_token
        flat_index[b * n] = b * n
        for x in range(n):
            if int(tree_mask_mode) == 0:
                token_tree_idx = seq_tree_idx + (seq_len + n) * x + seq_len + 1
            else:
                token_tree_idx = n * n * b + n * x + 1
            flat_mask[token_tree_idx - 1] = True
            flat_mask[token_tree_idx : token_tree_idx + n - 1] = False
            if x == 0:
                continue
            current, steps = x - 1, 0
            for _ in range(depth):
                steps += 1
                flat_mask[token_tree_idx + current] = True
                parent_tb = selected[current] // topk
                if parent_tb == 0:
                    break
                found = _parent_position(selected, parent_row[parent_tb], n - 1)
                if found is None:
                    break
                current = found
            flat_positions[b * n + x] = steps + seq_len
        prefix_sum += seq_len


def verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                           retrive_next_sibling, target_predict) -> None:
    """Walk each request's draft tree, accepting the draft tokens that equal the target's argmax (Triton:
    verify_tree_greedy_kernel_triton). Writes predicts (the target's token at every accepted position and the
    bonus), accept_index and accept_token_num."""
    batch, num_draft = candidates.shape
    num_spec = accept_index.shape[1]
    index, next_token, sibling = retrive_index.tolist(), retrive_next_token.tolist(), retrive_next_sibling.tolist()
    drafts = candidates.tolist()
    target = target_predict.reshape(-1).tolist()
    for b in range(batch):
        last = index[b][0]
        accept_index[b, 0] = last
        accepted, current = 0, 0
        for _ in range(1, num_spec):
            current = next_token[b][current]
            wanted = target[last]
            while current != -1 and drafts[b][current] != wanted:
                current = sibling[b][current]
            if current == -1:
                break
            predicts[last] = wanted
            accepted += 1
            accept_index[b, accepted] = index[b][current]
            last = index[b][current]
        accept_token_num[b] = accepted
        predicts[last] = target[last]
