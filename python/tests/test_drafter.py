"""Speculative decoding in Model.generate with Gemma 4's MTP drafter (docs/SPECULATIVE.md): the
tiny-a target (q8) with the tiny-mtp-a tracking drafter (q8) inside its bundle, against plain
decoding and `plume run`."""
import os
import shutil
import threading
import unittest

import plume
from common import ROOT, bundle, cli, tmpdir

MTP = os.path.join(ROOT, "tests", "data", "tiny-mtp-a")


def _drafters():
    """(the bundle with its drafter inside, the drafter alone, a drafter of another backbone),
    made once."""
    base = os.path.join(tmpdir(), "mtp")
    withd, track, bad = base + "-withd", base + "-track", base + "-bad"
    if not os.path.isdir(withd):
        cli("convert", os.path.join(MTP, "hf_track"), track, "--weights", "q8", "--quiet")
        shutil.copytree(bundle("q8"), withd)
        shutil.copytree(track, os.path.join(withd, "drafter"))
        shutil.copytree(track, bad)
        with open(os.path.join(bad, "config.json")) as f:
            cfg = f.read()
        with open(os.path.join(bad, "config.json"), "w") as f:
            f.write(cfg.replace('"backbone_hidden_size": 64', '"backbone_hidden_size": 128'))
    return withd, track, bad


class TestDrafter(unittest.TestCase):
    """The drafter is on by default when the bundle has one; greedy text is plain decoding's."""

    @classmethod
    def setUpClass(cls):
        cls.withd, cls.track, cls.bad = _drafters()
        cls.m = plume.Model(cls.withd, threads=1)
        cls.plain = plume.Model(cls.withd, threads=1, no_drafter=True)

    @classmethod
    def tearDownClass(cls):
        cls.m.close()
        cls.plain.close()

    def text(self, m, msg, **kw):
        prompt = plume.render_chat([{"role": "user", "content": msg}], add_generation_prompt=True)
        return "".join(m.generate(prompt, **kw))

    def test_found_in_the_bundle_and_turned_off(self):
        self.assertEqual(os.path.realpath(self.m.drafter), os.path.realpath(os.path.join(self.withd, "drafter")))
        self.assertIsNone(self.plain.drafter)
        with plume.Model(bundle("q8"), threads=1) as m:
            self.assertIsNone(m.drafter)
        with plume.Model(bundle("q8"), threads=1, drafter=self.track) as m:
            self.assertEqual(m.drafter, self.track)

    def test_refused(self):
        with self.assertRaises(plume.FormatError) as cm:
            plume.Model(bundle("q8"), threads=1, drafter=self.bad)
        self.assertIn("does not match", str(cm.exception))
        with self.assertRaises(plume.InvalidArgumentError):
            plume.Model(self.withd, threads=1, drafter=self.track, no_drafter=True)
        with self.assertRaises(plume.InvalidArgumentError) as cm:
            plume.Model(self.withd, threads=1, no_lookup=True, no_drafter=True)
        self.assertIn("contradict", str(cm.exception))
        with self.assertRaises(plume.InvalidArgumentError) as cm:
            plume.Model(bundle("q8"), threads=1, no_lookup=True)  # no drafter to draft alone
        self.assertIn("no drafter", str(cm.exception))
        for bad in (-1, 64, 1.5, True):
            with self.assertRaises(plume.InvalidArgumentError):
                self.m.generate("x", 4, temperature=0, draft=bad)

    def test_greedy_identical_and_equals_plume_run(self):
        before = self.m.draft_stats
        for msg in ("la la la la la la", "Why is the sky blue?", "abc abc abc abc"):
            want = self.text(self.plain, msg, max_tokens=40, temperature=0, draft=0)
            self.assertGreater(len(want), 4)
            for draft in (None, 1, 3, 5):
                self.assertEqual(self.text(self.m, msg, max_tokens=40, temperature=0, draft=draft), want,
                                 (msg, draft))
            self.assertEqual(self.text(self.plain, msg, max_tokens=40, temperature=0), want, msg)  # lookup
            _, out, _ = cli("run", "-m", self.withd, "-p", msg, "-t", 1, "-n", 40, "--temp", 0)
            self.assertEqual(want + "\n", out.decode("utf-8"), msg)
        after = self.m.draft_stats
        drafted, accepted = after["drafted"] - before["drafted"], after["accepted"] - before["accepted"]
        self.assertGreater(accepted, 0)  # the tracking drafter's guesses were kept, some
        self.assertGreater(drafted, accepted)  # and some refused
        lookup = after["lookup_drafted"] - before["lookup_drafted"]
        kept = after["lookup_accepted"] - before["lookup_accepted"]
        self.assertGreater(lookup, 0)  # prompt lookup drafted beside the drafter ("la la la", "abc abc")
        self.assertTrue(0 <= kept <= lookup and lookup < drafted, (kept, lookup, drafted))

    def test_greedy_identical_without_lookup(self):
        """no_lookup: the drafter alone (by default prompt lookup drafts beside it): the same text."""
        with plume.Model(self.withd, threads=1, no_lookup=True) as m:
            self.assertIsNotNone(m.drafter)
            for msg in ("la la la la la la", "abc abc abc abc"):
                want = self.text(self.plain, msg, max_tokens=40, temperature=0, draft=0)
                for draft in (None, 2):
                    self.assertEqual(self.text(m, msg, max_tokens=40, temperature=0, draft=draft), want, (msg, draft))
            self.assertGreater(m.draft_stats["drafted"], 0)
            self.assertEqual(m.draft_stats["lookup_drafted"], 0)

    def test_stop_strings_and_format(self):
        full = self.text(self.plain, "Hello there", max_tokens=40, temperature=0, draft=0)
        stop = full[4:7]
        self.assertEqual(self.text(self.m, "Hello there", max_tokens=40, temperature=0, stop=[stop]),
                         full[:full.find(stop)])
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
        want = self.text(self.plain, "JSON please", max_tokens=30, temperature=0, json_schema=schema, draft=0)
        self.assertEqual(self.text(self.m, "JSON please", max_tokens=30, temperature=0, json_schema=schema), want)
        self.assertTrue(want.startswith("{"), want)

    def test_session_left_as_plain_decoding_leaves_it(self):
        """After each turn, and after a generation the caller stops early (speculative steps
        may have fed guesses not handed out yet), the session holds what plain decoding's
        does: with the MTP drafter, with prompt lookup (which keeps many guesses of this
        repetitive text), and without drafting."""
        turns = ["Hi there", "And more", "la la la la la la la la"]
        results = []
        for m, draft in ((self.m, None), (self.plain, 3), (self.plain, 0)):
            runs = []
            with m.session() as s:
                convo = []
                for t in turns:
                    convo.append({"role": "user", "content": t})
                    ans = "".join(m.generate(plume.render_chat(convo, True), max_tokens=12, temperature=0,
                                             session=s, draft=draft))
                    convo.append({"role": "assistant", "content": ans})
                    runs.append((ans, s.tokens.tolist()))
                for k in range(1, 12):  # stopped after k pieces
                    g = m.generate(plume.render_chat(convo + [{"role": "user", "content": "la la la la"}], True), 40,
                                   temperature=0, session=s, draft=draft)
                    for _ in range(k):
                        next(g, None)
                    g.close()
                    runs.append(s.tokens.tolist())
            results.append(runs)
        self.assertEqual(results[0], results[2])
        self.assertEqual(results[1], results[2])

    def test_sampling_with_the_drafter(self):
        with plume.Model(bundle("q8"), threads=1, drafter=self.track) as m:
            a = self.text(m, "la la la la", max_tokens=40, temperature=0.8, top_k=8, seed=5)
            b = self.text(m, "la la la la", max_tokens=40, temperature=0.8, top_k=8, seed=5)
            self.assertEqual(a, b)  # a seed keeps its text
            self.assertGreater(m.draft_stats["drafted"], 0)  # named: sampled generations draft
        before = self.m.draft_stats["drafted"]
        self.text(self.m, "la la la la", max_tokens=20, temperature=0.8, seed=5)  # the bundle's: not by default
        self.assertEqual(self.m.draft_stats["drafted"], before)

    def test_threads_each_their_own_drafter(self):
        want = self.text(self.plain, "la la la la la la", max_tokens=30, temperature=0, draft=0)
        got = [None] * 4

        def run(i):
            got[i] = self.text(self.m, "la la la la la la", max_tokens=30, temperature=0)

        ts = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(got, [want] * 4)


if __name__ == "__main__":
    unittest.main()
