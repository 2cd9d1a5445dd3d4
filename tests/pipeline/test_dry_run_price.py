"""k3-launch --dry-run's prefill chunk and read price (docs/memory-plan.md "Prefill chunk",
"Read price"), on the real release's config + index (tests/data/k3-release: dry runs read no
shard) and the demo model.

- configs/desktop.toml at 32G, --json: the planned chunk fits (at most what fits, at most the
  context), and its bytes per prompt token are at most an eighth of the release figure at the
  config's old chunk of 128 (issue 22: 10.8 GB), worked out here from the flat-routing formula.
- --disk-rate and --prompt-tokens give seconds: the bytes over the rate.
- --prefill-chunk above what fits is capped with a note; --json without --dry-run, a bad
  --disk-rate and a negative --prompt-tokens are exit 2 with one line naming the option.
- --disk-rate probe reads the demo model's shards with O_DIRECT (skipped where the filesystem
  refuses O_DIRECT).
Environment: K3_BIN (directory with the binaries).
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import main, require  # noqa: E402

BIN = os.environ.get("K3_BIN", "")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RELEASE = os.path.join(ROOT, "tests", "data", "k3-release")
DESKTOP = os.path.join(ROOT, "configs", "desktop.toml")
DEMO = os.path.join(ROOT, "configs", "demo.toml")


def launch(*args, config=DESKTOP, model=RELEASE):
    cmd = [os.path.join(BIN, "k3-launch"), config] + (["--model", model] if model else []) + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


class DryRunPrice(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(os.path.exists(os.path.join(BIN, "k3-launch")), "no k3-launch in K3_BIN")

    def test_desktop_32g_chunk_and_price(self):
        r = launch("--dry-run", "--json", "--budget", "32G", "--disk-rate", "3.2GB/s", "--prompt-tokens", "2000")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)  # stdout is the JSON object alone
        c, rb, s = j["prefill_chunk"], j["read_bytes"], j["seconds"]
        self.assertGreaterEqual(c["chunk"], 64)
        self.assertLessEqual(c["chunk"], c["fits"])
        self.assertLessEqual(c["fits"], 8192)  # desktop's context
        self.assertLessEqual(j["total"], 32 << 30)
        self.assertEqual(sum(x["bytes"] for x in j["regions"]), j["total"])
        # Issue 22's figure at chunk 128: 92 layers x 896(1 - (55/56)^128) experts x 17,547,264 B
        # plus ~78.6 GB of streamed trunk (23 layers pinned), per token.
        before = (92 * 896 * (1 - (55 / 56) ** 128) * 17547264 + 78.58e9) / 128
        self.assertAlmostEqual(before / 1e9, 10.8, delta=0.1)
        self.assertLessEqual(rb["per_prompt_token"], before / 8)
        self.assertLessEqual(rb["per_prompt_token"], rb["per_prompt_token_at_floor_chunk"])
        self.assertAlmostEqual(s["seconds_per_generated_token"], rb["per_generated_token"] / 3.2e9, delta=1e-6)
        self.assertAlmostEqual(s["first_token_seconds"], rb["prompt_bytes"] / 3.2e9, delta=1e-6)
        # The text form says the same.
        t = launch("--dry-run", "--budget", "32G")
        self.assertEqual(t.returncode, 0, t.stderr)
        self.assertIn("prefill chunk: %d tokens" % c["chunk"], t.stdout)
        self.assertIn("read per prompt token:", t.stdout)

    def test_a_cap_above_what_fits_is_noted(self):
        r = launch("--dry-run", "--budget", "3G", "--prefill-chunk", "8192")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("prefill_chunk 8192 capped:", r.stdout)
        j = json.loads(launch("--dry-run", "--json", "--budget", "3G", "--prefill-chunk", "8192").stdout)
        self.assertLess(j["prefill_chunk"]["fits"], 8192)
        self.assertLessEqual(j["prefill_chunk"]["chunk"], j["prefill_chunk"]["fits"])
        small = json.loads(launch("--dry-run", "--json", "--budget", "32G", "--prefill-chunk", "100").stdout)
        self.assertLessEqual(small["prefill_chunk"]["chunk"], 100)

    def test_bad_options(self):
        for args, name in ((["--json"], "--json"), (["--dry-run", "--disk-rate", "fast"], "--disk-rate"),
                           (["--dry-run", "--prompt-tokens", "-1"], "--prompt-tokens")):
            r = launch("--budget", "32G", "--ids", "1,2", *args)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn(name, r.stderr)
            self.assertTrue(r.stderr.startswith("k3-launch: "), r.stderr)

    def test_probe_reads_the_demo_shards(self):
        r = launch("--dry-run", "--json", "--disk-rate", "probe", "--ids", "1,5,9", config=DEMO, model=None)
        if r.returncode != 0 and "O_DIRECT" in r.stderr:
            self.skipTest("the filesystem refuses O_DIRECT")
        self.assertEqual(r.returncode, 0, r.stderr)
        j = json.loads(r.stdout)
        self.assertGreater(j["seconds"]["disk_rate_bytes_per_second"], 0)
        self.assertIn("probed", j["seconds"]["disk_rate_source"])
        self.assertEqual(j["read_bytes"]["prompt_tokens"], 3)  # the length of --ids


if __name__ == "__main__":
    main()
