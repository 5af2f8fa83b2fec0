"""The federated round: FedAvg-GRPO, FedProx-GRPO and PubSwap (Balanced, Random).

tau local steps of the round's participants (a seeded subset under partial participation); for PubSwap
every swap_period-th step is public: the clients answer one shared batch and the server swaps the
answers between them (actors/server.py, pubswap/algorithms/swap.py). Then the aggregation strategy
averages the participants' adapters into the next global one (pubswap/algorithms/aggregation/;
FedProx wraps any strategy). Every `checkpoint.every_steps` steps an in-round checkpoint keeps the
participants' adapters and optimizer states, so a restart continues after that step.
"""

from __future__ import annotations

from pubswap.lora import Adapter, num_bytes
from pubswap.methods.base import Method, RoundContext, round_record, step_done
from pubswap.run.faults import maybe_crash


class Federated(Method):
    names = ("fedavg-grpo", "fedprox-grpo", "pubswap-balanced", "pubswap-random")

    @property
    def swap_rule(self) -> str | None:
        return self.name.removeprefix("pubswap-") if self.name.startswith("pubswap-") else None

    @property
    def uses_prox(self) -> bool:
        return self.name == "fedprox-grpo"

    def is_public_step(self, federation, step: int) -> bool:
        return self.swap_rule is not None and step % federation.swap_period == 0

    def problem(self, cfg) -> tuple[str, str] | None:
        f = cfg.federation
        if self.swap_rule is None:
            return super().problem(cfg)
        if f.swap_period >= f.tau:
            return (
                "federation.swap_period",
                f"must be < federation.tau (paper: tau_swap < tau), got {f.swap_period} >= {f.tau}",
            )
        if cfg.data.public_size < cfg.grpo.b:
            return "data.public_size", f"must be >= grpo.b ({cfg.grpo.b}) for a PubSwap method"
        return super().problem(cfg)

    def run_round(self, fed, cfg, r: int, start: Adapter, ctx: RoundContext) -> tuple[dict, Adapter, None]:
        """Every client holds the round-start global adapter with a fresh optimizer when this is called.
        With an in-round checkpoint of round r (`ctx.inround`), the participants take its adapters and
        optimizer states and the round continues after its step."""
        f, inround = cfg.federation, ctx.inround
        fed.restart_timing()  # set_global, recovery: not this round's
        parts = fed.participants(r)
        steps, first = [], 1
        saved = inround.load(r) if inround is not None else None
        if saved is not None:
            fed.load_train_states(saved.states)
            steps, first = list(saved.steps), saved.step + 1
            print(
                f"round {r}: continuing at step {first} from the in-round checkpoint after step {saved.step}",
                flush=True,
            )
        with ctx.progress(f.tau, f"round {r}/{f.rounds}") as bar:
            bar.update(first - 1)
            for s in range(first, f.tau + 1):
                maybe_crash("driver", r, s, "step")
                fed.verify_incarnations()
                out = fed.public_step(r, s, parts) if self.is_public_step(f, s) else fed.private_step(r, s, parts)
                steps.append(out)
                step_done(ctx, bar, cfg, r, s, out)
                if inround is not None and inround.due(s, f.tau):
                    states = fed.train_states(parts)
                    fed.verify_incarnations()  # states of a restarted actor would be its initial ones
                    inround.save(r, s, steps, states)
                    bar.write(f"round {r} step {s}: in-round checkpoint saved")
                    ctx.events.emit("inround", round=r, step=s)
                bar.update()
        fed.verify_incarnations()
        global_adapter, avg, comm = fed.average(r, parts, start)
        fed.verify_incarnations()
        record = round_record(r, parts, steps, avg, len(fed.actors), num_bytes(start), comm)
        if "privacy" in comm:
            record["privacy"] = comm["privacy"]
        return record, global_adapter, None
