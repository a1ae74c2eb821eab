"""Tiny real training jobs (CPU) for tests/test_integrations_frameworks.py, one per framework.

Run as ``python integration_jobs.py FRAMEWORK ROOT RESULT_JSON [--policy P] [--scenarios ...]``:
for each scenario, trains a tiny model with TensorBoard logging and profiling on into the logdir
``ROOT/<scenario>``, lets the Footprint integration reduce the run at the end, and records the
outcome in RESULT_JSON under the scenario's name. One process runs every scenario, so the
framework is imported once. The exit status is the training job's: 0 whatever the reductions did.

Scenarios: ``real`` reduces with policy P; ``fault`` does the same with the transaction made to
fail after verification (its ``before`` is the logdir hashed when the transaction began: what
the failed reduction must leave); ``dry`` uses the integration's defaults (a logged dry run);
``crash`` (Lightning) makes training raise midway.
"""
import argparse
import hashlib
import json
import logging
import os
import sys


def tree(root):
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".tb-footprint"]
        for n in files:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def arm_fault(step, logdir, box):
    from tb_footprint_plugin.engine import faults

    def snapshot():
        box["before"] = tree(logdir)

    faults.arm("reduce.journal", snapshot)  # the run as it was when the transaction started
    faults.arm(step, "raise")
    return faults.disarm_all


def keras_job(logdir, opts):
    import numpy as np
    import keras

    from tb_footprint_plugin.integrations import FootprintKerasCallback

    job_dir = os.path.join(logdir, "keras_job")
    x = np.random.RandomState(0).rand(64, 8).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 4).astype("float32")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile("adam", "binary_crossentropy")
    tb = keras.callbacks.TensorBoard(log_dir=job_dir, profile_batch=(2, 3), histogram_freq=1)
    # before the TensorBoard callback on purpose: the reduction must wait for its writers
    fp = FootprintKerasCallback(tb, logdir=logdir, **opts)
    model.fit(x, y, batch_size=8, epochs=2, validation_split=0.25, callbacks=[fp, tb], verbose=0)
    return fp.wait(300)



def lightning_job(logdir, opts):
    import torch
    import lightning.pytorch as pl

    crash = opts.pop("crash", False)
    from lightning.pytorch.loggers import TensorBoardLogger
    from lightning.pytorch.profilers import PyTorchProfiler

    from tb_footprint_plugin.integrations import FootprintLightningCallback

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.save_hyperparameters({"hidden": 16})
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

        def training_step(self, batch, i):
            if crash and self.global_step == 3:
                raise RuntimeError("training diverged (test)")
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.manual_seed(0)
    x = torch.rand(64, 8)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    logger = TensorBoardLogger(save_dir=logdir, name="lit")
    profiler = PyTorchProfiler(dirpath=None, filename="perf",
                               schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1))
    fp = FootprintLightningCallback(logdir, **opts)
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=logger, profiler=profiler, callbacks=[fp],
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         log_every_n_steps=1)
    try:
        trainer.fit(Tiny(), data)
    except RuntimeError as e:
        if not crash:
            raise
        print(f"footprint test: fit raised {e}", file=sys.stderr)
    return fp.wait(300)


def hf_job(logdir, opts):
    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

    from tb_footprint_plugin.integrations import FootprintHFCallback

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=2)
    model = BertForSequenceClassification(config)
    data = [{"input_ids": torch.randint(0, 64, (12,)), "labels": torch.tensor(i % 2)} for i in range(32)]
    run_dir = os.path.join(logdir, "hf_job")
    os.environ["TENSORBOARD_LOGGING_DIR"] = run_dir
    args = TrainingArguments(output_dir=logdir + "_hf_out", report_to=["tensorboard"],
                             per_device_train_batch_size=4, num_train_epochs=1, logging_steps=2,
                             save_strategy="no", use_cpu=True, disable_tqdm=True)
    prof = torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(run_dir))

    class ProfilerStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            prof.step()

    fp = FootprintHFCallback(logdir, **opts)
    with prof:
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[ProfilerStep(), fp])
        trainer.train()
    return fp.wait(300)


def loop_job(logdir, opts):
    import torch
    from torch.utils.tensorboard import SummaryWriter

    import tb_footprint_plugin as fp

    run_dir = os.path.join(logdir, "loop_job")
    with fp.reduce_when_done(logdir, **opts) as job:
        net = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        with SummaryWriter(run_dir) as w, torch.profiler.profile(
                schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1),
                on_trace_ready=torch.profiler.tensorboard_trace_handler(run_dir)) as prof:
            for step in range(6):
                loss = net(torch.rand(8, 4)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                w.add_scalar("loss", loss.item(), step)
                prof.step()
    return job.wait(300)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("framework", choices=["keras", "lightning", "hf", "loop"])
    ap.add_argument("root")
    ap.add_argument("result")
    ap.add_argument("--policy", default="lossless")
    ap.add_argument("--scenarios", default="real,fault,dry")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("tb_footprint_plugin").setLevel(logging.INFO)
    job = {"keras": keras_job, "lightning": lightning_job, "hf": hf_job, "loop": loop_job}[args.framework]
    results = {}
    for scenario in args.scenarios.split(","):
        logdir = os.path.join(args.root, scenario)
        os.makedirs(logdir)
        box = results[scenario] = {}
        disarm = arm_fault("reduce.verify", logdir, box) if scenario == "fault" else None
        opts = {} if scenario == "dry" else {"policy": args.policy, "dry_run": False}
        if scenario == "crash":  # training raises: nothing is reduced, the outcome still comes
            opts["crash"] = True
        try:
            outcome = job(logdir, opts)
        finally:
            if disarm:
                disarm()
        box["outcome"] = outcome.to_dict() if outcome is not None else None
        box["after"] = tree(logdir)
        print(f"footprint test: {scenario} done", file=sys.stderr, flush=True)
    with open(args.result, "w") as f:
        json.dump(results, f, indent=1, default=str)
    print("training job done")


if __name__ == "__main__":
    main()
