#!/usr/bin/env python3
"""A chat in the terminal over plume: one model, one session (the chunk states, made once and
carried from turn to turn, so each turn computes only its new tokens)."""
import argparse

import plume

ap = argparse.ArgumentParser(description="Chat with Gemma 4 E2B through plume.")
ap.add_argument("model", nargs="?", help="bundle (default: $PLUME_MODEL, ~/.cache/plume/gemma-4-e2b)")
ap.add_argument("-n", type=int, default=512, help="tokens per answer at most")
ap.add_argument("--temp", type=float, default=1.0, help="temperature (0: greedy)")
ap.add_argument("--seed", type=int, help="make the answers reproducible")
ap.add_argument("--system", help="a system prompt")
args = ap.parse_args()

with plume.Model(args.model) as m, m.session() as s:
    start = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(start)
    while True:
        try:
            messages.append({"role": "user", "content": input("> ")})
        except EOFError:
            break
        prompt = plume.render_chat(messages, add_generation_prompt=True)
        answer = ""
        try:
            for piece in m.generate(prompt, max_tokens=args.n, temperature=args.temp,
                                    seed=args.seed, session=s):
                print(piece, end="", flush=True)
                answer += piece
        except plume.RangeError as e:  # the context is full: start over
            print("[%s; starting a new conversation]" % e, end="")
            messages = list(start)
            s.rewind(0)
            continue
        finally:
            print()
        messages.append({"role": "assistant", "content": answer})
