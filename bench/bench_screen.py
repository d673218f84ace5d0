"""What validating each answer as it arrives costs: `judge_answer` (the rules of validation/rules.py on one
answer, as the client's screen runs them in the event loop) per answer, by output length.

Answers are synthetic Kimi-shaped outputs (ordinary ids, one `</think>` at 70%, the EOS last) after a
505-token prompt ending in the generation prompt; the ids arrive as Python lists, as the client parses
them from JSON. The table gives the median of --repeats timings of --answers calls per length.

Run: `.venv/bin/python bench/bench_screen.py [--answers N] [--repeats R]`.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time

from eagle_datagen.profile import load_profile
from eagle_datagen.validation.screening import judge_answer

LENGTHS = (200, 1000, 4000, 16000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    profile = load_profile("kimi-k2.5")
    rng = random.Random(0)
    prompt = [rng.randrange(100000) for _ in range(500)] + [163586, 163588, 69702, 163601, 163606]
    print(f"python {platform.python_version()} on {platform.machine()}; {args.answers} answers x {args.repeats}")
    print("| output tokens | µs per answer (median) | answers/s on one core |")
    print("| ---: | ---: | ---: |")
    for length in LENGTHS:
        output = [rng.randrange(100000) for _ in range(length)]
        output[int(length * 0.7)] = 163607
        output.append(163586)
        meta = {"finish_reason": {"type": "stop"}, "completion_tokens": len(output), "prompt_tokens": len(prompt)}
        assert judge_answer(prompt, output, meta, profile).reason is None
        timings = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            for _ in range(args.answers):
                judge_answer(prompt, output, meta, profile)
            timings.append((time.perf_counter() - started) / args.answers)
        median = statistics.median(timings)
        print(f"| {length:,} | {median * 1e6:,.0f} | {1 / median:,.0f} |")


if __name__ == "__main__":
    main()
