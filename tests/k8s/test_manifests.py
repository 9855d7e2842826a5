"""The Kubernetes manifests of a sharded sweep (scripts/k8s/generate.py): valid against the
Kubernetes schemas that kubernetes-validate bundles (offline), an Indexed Job with one index per
shard and DRIFTGATE_SHARD_COUNT its completions; broken manifests are rejected; bad values exit 2;
and the pods' commands, run here as Kubernetes would run them, give the unsharded run's verdict."""
import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

import kubernetes_validate
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATE = os.path.join(ROOT, "scripts", "k8s", "generate.py")
DRIFTGATE = os.environ.get("DRIFTGATE_EXE", "")
# The oldest Kubernetes the manifests are for (podFailurePolicy is GA from 1.31) and the newest bundled.
VERSIONS = ("1.31.0", kubernetes_validate.latest_version())
GATE = ["gate", "--threads", "1", "--no-time", "--base", "rmsnorm_cpu_naive_f32", "--patch", "rmsnorm_cpu_blocked_f32",
        "--suite", "rmsnorm-smoke"]


def generate(out_dir, *options, command=GATE):
    return subprocess.run([sys.executable, GENERATE, *options, "--out-dir", out_dir, *command],
                          capture_output=True, text=True)


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def validate(doc):
    """Raises kubernetes_validate.ValidationError where `doc` breaks a schema (strict: no unknown field)."""
    for version in VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


class Manifests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.out = self.dir.name
        r = generate(self.out, "--name", "rel-1-4", "--image", "registry.example/driftgate:1.4", "--claim",
                     "driftgate-results", "--shards", "3", "--cpus", "4", "--memory", "8Gi")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.sweep, self.merge = load(f"{self.out}/sweep.yaml"), load(f"{self.out}/merge.yaml")

    def tearDown(self):
        self.dir.cleanup()

    def test_generated_manifests_are_valid(self):
        validate(self.sweep)
        validate(self.merge)
        r = generate(self.out, "--name", "v", "--image", "img", "--claim", "c", "--shards", "16", "--parallelism", "4",
                     command=["verify", "--candidate", "kda_cpu_chunk_f32", "--suite", "kda-gate"])
        self.assertEqual(r.returncode, 0, r.stderr)
        validate(load(f"{self.out}/sweep.yaml"))
        self.assertEqual(load(f"{self.out}/sweep.yaml")["spec"]["parallelism"], 4)

    def test_sweep_is_an_indexed_job_with_one_index_per_shard(self):
        spec = self.sweep["spec"]
        self.assertEqual(spec["completionMode"], "Indexed")
        self.assertEqual(spec["completions"], 3)
        self.assertEqual(spec["parallelism"], 3)
        pod = spec["template"]["spec"]
        self.assertEqual(pod["restartPolicy"], "Never")
        container = pod["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        self.assertEqual(env["DRIFTGATE_SHARD_COUNT"], "3")   # = completions
        self.assertEqual(env["DRIFTGATE_RESULTS"], "/results/rel-1-4")
        self.assertEqual(container["image"], "registry.example/driftgate:1.4")
        self.assertEqual(container["args"], ["driftgate"] + GATE)
        self.assertEqual(container["resources"]["requests"], {"cpu": "4", "memory": "8Gi"})
        self.assertEqual(container["volumeMounts"], [{"name": "results", "mountPath": "/results"}])
        self.assertEqual(pod["volumes"], [{"name": "results", "persistentVolumeClaim": {"claimName": "driftgate-results"}}])
        self.assertEqual(spec["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"], [2, 3])
        merge = self.merge["spec"]["template"]["spec"]
        self.assertEqual(self.merge["metadata"]["name"], "rel-1-4-merge")
        self.assertEqual(merge["volumes"], pod["volumes"])
        self.assertEqual(merge["containers"][0]["env"], [{"name": "DRIFTGATE_RESULTS", "value": "/results/rel-1-4"}])

    def test_broken_manifests_are_rejected(self):
        """The schemas check types, required fields and (strict) unknown fields; not enum values such as
        completionMode, which test_sweep_is_an_indexed_job_with_one_index_per_shard checks."""
        def pod(doc):
            return doc["spec"]["template"]["spec"]

        breakages = {
            "completions not a number": lambda d: d["spec"].update(completions="three"),
            "DRIFTGATE_SHARD_COUNT unquoted": lambda d: pod(d)["containers"][0]["env"][0].update(value=3),
            "a typo, unknown field": lambda d: d["spec"].update(completion=3),
            "no containers": lambda d: pod(d).pop("containers"),
            "a container without a name": lambda d: pod(d)["containers"][0].pop("name"),
            "a volume without its claim": lambda d: pod(d)["volumes"][0]["persistentVolumeClaim"].pop("claimName"),
        }
        for what, breakage in breakages.items():
            for manifest in (self.sweep, self.merge):
                if what == "DRIFTGATE_SHARD_COUNT unquoted" and manifest is self.merge:
                    continue
                doc = copy.deepcopy(manifest)
                breakage(doc)
                with self.assertRaises(kubernetes_validate.ValidationError, msg=what):
                    validate(doc)

    def test_bad_values_exit_2_naming_them(self):
        base = ["--image", "img", "--claim", "c", "--shards", "3"]
        for options, command, message in (
                (["--name", "Rel_1"] + base, GATE, "--name 'Rel_1'"),
                (["--name", "r", "--image", "img", "--claim", "c", "--shards", "0"], GATE, "--shards 0"),
                (["--name", "r", "--parallelism", "4"] + base, GATE, "--parallelism 4"),
                (["--name", "r", "--memory", "lots"] + base, GATE, "--memory 'lots'"),
                (["--name", "r"] + base, ["mutants", "--suite", "rmsnorm-smoke"], "gate, verify or bench"),
                (["--name", "r"] + base, GATE + ["--shard", "0/3"], "set --out, --json and --shard")):
            r = generate(self.out, *options, command=command)
            self.assertEqual(r.returncode, 2, (options, command, r.stdout))
            self.assertIn(message, r.stderr)

    @unittest.skipUnless(os.access(DRIFTGATE, os.X_OK), "no driftgate executable in DRIFTGATE_EXE")
    def test_pods_commands_give_the_unsharded_verdict(self):
        """Every index's pod command as Kubernetes runs it (command + args, the env given, plus
        JOB_COMPLETION_INDEX), then the merge Job's: the merge is the unsharded gate's verdict."""
        mount = os.path.join(self.out, "volume")
        r = generate(self.out, "--name", "run", "--image", "img", "--claim", "c", "--shards", "3", "--mount", mount,
                     "--driftgate", DRIFTGATE)
        self.assertEqual(r.returncode, 0, r.stderr)
        sweep, merge = load(f"{self.out}/sweep.yaml"), load(f"{self.out}/merge.yaml")
        for index in range(3):
            c = sweep["spec"]["template"]["spec"]["containers"][0]
            env = dict(os.environ, JOB_COMPLETION_INDEX=str(index), **{e["name"]: e["value"] for e in c["env"]})
            p = subprocess.run(c["command"] + c["args"], env=env, capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)   # shard 1 has no case: CANNOT_JUDGE, still 0
            self.assertIn(f"shard {index} of 3: exit {4 if index == 1 else 0}", p.stdout)
        c = merge["spec"]["template"]["spec"]["containers"][0]
        env = dict(os.environ, **{e["name"]: e["value"] for e in c["env"]})
        p = subprocess.run(c["command"] + c["args"], env=env, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("verdict: MERGE (precision only)", p.stdout)
        with open(os.path.join(mount, "run", "merged", "verdict.json")) as f:
            merged = json.load(f)
        whole = os.path.join(self.out, "whole")
        p = subprocess.run([DRIFTGATE] + GATE + ["--out", whole], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(os.path.join(whole, "verdict.json")) as f:
            unsharded = json.load(f)
        self.assertEqual(merged["verdict"], "MERGE")
        self.assertEqual(len(merged["shards"]["merged"]), 3)
        self.assertEqual([r["case"] for r in merged["rows"]], [r["case"] for r in unsharded["rows"]])
        self.assertEqual(merged["summary"], unsharded["summary"])


if __name__ == "__main__":
    unittest.main()
