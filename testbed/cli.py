"""The `testbed` command: typer app. Exit codes: 0 ok, 2 bad input, 1 failure.

Importing this module builds no scenario model and no data library (that takes seconds): a command
imports what it uses, so `testbed --help` answers at once (tests/test_cli_help.py counts it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from testbed import load as load_mod
from testbed import screen
from testbed.emulation import backends
from testbed.emulation.shaping import SHAPERS
from testbed.load import CAPACITY_FILE
from testbed.policies import DISTANCES, POLICIES
from testbed.units import format_bandwidth, format_duration
from testbed.options import OneLineErrors, at_scale, checked_as, plain_help, view_address, view_port, with_system
from testbed.screen import Table
from testbed.view.server import LOOPBACK

if TYPE_CHECKING:
    from testbed import topology as topo_mod
    from testbed.scenario.loader import ScenarioError
    from testbed.scenario.model import Scenario

SCENARIO_DIR = Path("scenarios")
EXIT_FAILURE, EXIT_BAD_INPUT = 1, 2
POLICY_CHOICES = tuple(POLICIES)  # the registry's names (testbed.policies.registry)


app = typer.Typer(
    cls=OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="Emulate geo-distributed pub/sub scenarios (ePulsar) on Containernet or Mininet.",
    epilog="\b\nExample: testbed show scenarios/uav-smoke.yaml; sudo testbed run scenarios/uav-smoke.yaml --backend mininet",
)
console = screen.console(soft_wrap=True)  # a line stays one line in logs and pipes, however long its paths
errors = screen.console(stderr=True)



def _fail_input(error: Exception) -> typer.Exit:
    print(str(error), file=sys.stderr)
    return typer.Exit(EXIT_BAD_INPUT)


def _load(path: Path, scale: Optional[float] = None, seed: Optional[int] = None,
          jitter: Optional[str] = None, system: Optional[str] = None) -> tuple[Scenario, topo_mod.Topology]:
    """Load and validate, including the checks that need the data (zones vs towers, site names);
    the topology those checks built comes along, so a run builds it (and its k-means) once. A seed
    or a cities' jitter given here replaces the file's before the topology is built (zones,
    placements and links follow them); a system (--system) replaces the file's system under test,
    checked as the file's would be."""
    from testbed import topology as topo_mod
    from testbed.scenario.loader import ScenarioError, load

    try:
        written = at_scale(load(path), scale, path)
        scenario = with_system(written, system, path)
        if seed is not None:
            scenario = scenario.model_copy(update={"seed": seed})
        if jitter is not None:
            scenario = with_jitter(scenario, jitter, path)
        return scenario, topo_mod.checked(scenario, str(path), written_for=written.system)
    except (ScenarioError, ValueError) as error:
        raise _fail_input(error) from None


def with_jitter(scenario: Scenario, jitter: str, path: Path) -> Scenario:
    """The scenario with infrastructure.cities.jitter replaced: the same cities, their links constant
    ("none") or varying as WonderProxy's pings between them did ("measured"). Only a scenario built on
    cities has measured links to vary; another is refused rather than silently run unchanged."""
    cities = scenario.infrastructure.cities
    if cities is None:
        raise ValueError(f"{path}: --jitter: the scenario has no infrastructure.cities (only links between "
                         f"WonderProxy's cities have a measured spread)")
    infrastructure = scenario.infrastructure.model_copy(update={"cities": cities.model_copy(update={"jitter": jitter})})
    return scenario.model_copy(update={"infrastructure": infrastructure})


@app.command("list")
def list_scenarios(directory: Path = typer.Option(SCENARIO_DIR, help="Where to look for scenario files.")) -> None:
    """List the scenarios in ./scenarios (or --directory) with their description; exit 2 when
    there are none.

    Example: testbed list --directory scenarios/bench
    """
    from testbed.scenario.loader import ScenarioError, load

    paths = sorted(directory.glob("*.yaml"))
    if not paths:
        shipped = Path(__file__).resolve().parents[1] / SCENARIO_DIR
        raise _fail_input(ValueError(f"list: no scenario files (*.yaml) in {directory.resolve()}; give --directory DIR"
                                     + (f", e.g. --directory {shipped} (the shipped ones)" if shipped.is_dir() else "")))
    table = Table("scenario", "duration", "description")
    for path in paths:
        try:
            scenario = load(path)
            table.add_row(str(path), format_duration(scenario.duration), scenario.description)
        except ScenarioError as error:
            table.add_row(str(path), "-", f"[red]invalid: {error.problems[0]}[/red]")
    console.print(table)


@app.command()
def validate(paths: list[Path] = typer.Argument(..., help="Scenario files."),
             scale: Optional[float] = typer.Option(None, callback=checked_as("Scenario", "scale"),
                                                   help="Check at this scale (multiplies counts and rates)."),
             capacity: Path = typer.Option(CAPACITY_FILE, help="This machine's measured capacity (make bench-capacity): "
                                           "a load past what it can carry at all is an error."),
             system: Optional[str] = typer.Option(None, help="Check under this system under test (e.g. natscluster): "
                                                  "refused when it does not run the scenario's workload kind.")) -> None:
    """Validate scenario files; each error names file, line and field.

    Example: testbed validate scenarios/*.yaml
    """
    from testbed import topology as topo_mod
    from testbed.scenario.loader import ScenarioError, load

    failed = False
    for path in paths:
        try:
            written = at_scale(load(path), scale, path)
            scenario = with_system(written, system, path)
            topology = topo_mod.checked(scenario, str(path), written_for=written.system)
            judged_by = load_mod.capacity_file(scenario.workload.client_engine, capacity)
            for refusal in (_thin_access(path, scenario, topology),
                            _impossible(path, _offered_load(scenario, topology, judged_by)[1], judged_by)):
                if refusal is not None:
                    raise refusal
            console.print(f"{path}: ok ({scenario.name})", highlight=False)
        except ScenarioError as error:
            failed = True
            print(str(error), file=sys.stderr)
    if failed:
        raise typer.Exit(EXIT_BAD_INPUT)


def topology_dict(topology: topo_mod.Topology) -> dict:
    """The graph as plain data (`show --json`)."""
    def shaping(s: topo_mod.Shaping) -> dict:
        return {"delay_s": s.delay, "jitter_s": s.jitter, "loss": s.loss, "bandwidth_bps": s.bandwidth}

    sites = list(topology.sites)
    return {
        "name": topology.name,
        "sites": [vars(s) for s in topology.sites.values()],
        "nodes": [{"name": n.name, "role": n.role, "site": n.site, "ip": n.ip, "mobile": n.mobile,
                   "members": n.members, "access": shaping(n.access)} for n in topology.nodes.values()],
        "links": [{"a": link.a, "b": link.b, "kind": link.kind, **shaping(link.shaping)} for link in topology.links],
        "site_rtt_s": {a: {b: topology.site_rtt(a, b) for b in sites} for a in sites},
    }


def _shaping_text(s: topo_mod.Shaping) -> tuple[str, str, str, str]:
    return (format_duration(s.delay), format_duration(s.jitter) if s.jitter else "-",
            f"{s.loss * 100:g}%" if s.loss else "-", format_bandwidth(s.bandwidth) if s.bandwidth else "unlimited")


@app.command()
def show(path: Path = typer.Argument(..., help="Scenario file."),
         as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
         scale: Optional[float] = typer.Option(None, callback=checked_as("Scenario", "scale"),
                                              help="Multiply counts and rates."),
         capacity: Path = typer.Option(CAPACITY_FILE, help="This machine's measured capacity (make bench-capacity)."),
         system: Optional[str] = typer.Option(None, help="The system under test (default: the scenario's `system:`, "
                                              "else the one declaring its workload kind), e.g. natscluster."),
         ) -> None:
    """Print the topology: nodes, links with parameters, configured RTT between every pair of sites,
    and the load the scenario offers against this machine's measured capacity.

    Example: testbed show scenarios/mmog.yaml
    """
    from testbed import mobility, plugin

    scenario, topology = _load(path, scale, system=system)
    est, verdict = _offered_load(scenario, topology, capacity)
    handovers = mobility.plan(scenario, topology)
    if as_json:
        data = topology_dict(topology)
        data["handovers"] = [vars(h) for h in handovers]
        data["load"] = load_mod.as_dict(est, verdict)
        data["workload"], data["system"] = scenario.workload.kind, scenario.system
        print(json.dumps(data, indent=2))
        return
    console.print(f"[bold]{scenario.name}[/bold]: {scenario.description}")
    if scenario.system:  # the two axes: what is offered, and what runs it
        console.print(f"workload {scenario.workload.kind} on system under test {plugin.label(scenario)}",
                      highlight=False, markup=False)
    nodes = Table("node", "role", "site", "address", "access delay", "jitter", "loss", "bandwidth", title="Nodes")
    for n in topology.nodes.values():
        nodes.add_row(n.name + (" (mobile)" if n.mobile else ""), n.role, n.site, n.ip, *_shaping_text(n.access))
    console.print(nodes)
    if topology.links:
        links = Table("link", "kind", "one-way delay", "jitter", "loss", "bandwidth", title="Site links")
        for link in topology.links:
            links.add_row(f"{link.a} <-> {link.b}", link.kind, *_shaping_text(link.shaping))
        console.print(links)
    sites = list(topology.sites)
    matrix = Table("RTT (ms)", *sites, title="Configured RTT between sites")
    for a in sites:
        matrix.add_row(a, *(f"{topology.site_rtt(a, b) * 1e3:.3f}" for b in sites))
    console.print(matrix)
    if handovers:
        console.print(f"{len(handovers)} planned handovers; first: "
                      + ", ".join(f"{h.time:g}s {h.node} {h.from_site}->{h.to_site}" for h in handovers[:5]))
    for line in load_mod.lines(est, verdict):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    thin = _thin_access(path, scenario, topology)
    if thin is not None:  # show shows the scenario as it is; validate and run refuse it
        console.print(f"refused by validate and run: {thin}", highlight=False, markup=False, style="yellow")


def _offered_load(scenario: Scenario, topology: topo_mod.Topology, capacity: Path):
    """The scenario's offered load and its comparison with the capacity file (testbed.load; by
    default the one measured with the scenario's client data plane)."""
    capacity = load_mod.capacity_file(scenario.workload.client_engine, capacity)
    try:
        measured = load_mod.read_capacity(capacity)
    except ValueError as error:
        raise _fail_input(error) from None
    est = load_mod.estimate(scenario, topology)
    return est, load_mod.compare(est, measured, capacity)


def _thin_access(path: Path, scenario: Scenario, topology: topo_mod.Topology) -> ScenarioError | None:
    """Client access links too thin for their node's own messages (load.thin_access_links) as one
    scenario error at the access bandwidth's line, naming the worst node with both rates; None when
    every link carries its node's messages."""
    thin = load_mod.thin_access_links(scenario, topology)
    if not thin:
        return None
    from testbed.scenario.loader import Problem, ScenarioError, line_of

    worst = max(thin, key=lambda t: t.offered_bps / t.capacity_bps)
    others = len({t.node for t in thin} - {worst.node})
    loc = ("infrastructure", "links", "access", "bandwidth")
    return ScenarioError([Problem(
        str(path), line_of(str(path), loc), ".".join(loc),
        f"{format_bandwidth(worst.capacity_bps)}/s cannot carry what {worst.node} {worst.direction}: "
        f"{worst.messages_per_s:,.4g} msg/s of {scenario.workload.message_size:g} B + {load_mod.MESSAGE_OVERHEAD} B "
        f"protocol = {format_bandwidth(worst.offered_bps)}/s at least" + (f" (and {others} other client node{'s' * (others > 1)})"
                                                                          if others else "")
        + "; widen the link, or lower the load (--scale)")])


def _impossible(path: Path, verdict: load_mod.Verdict, capacity: Path) -> ScenarioError | None:
    """A load past what this machine can carry at all (`Verdict.impossible`) as a scenario error at
    the workload's line; None when it can be carried."""
    if not verdict.impossible:
        return None
    from testbed.scenario.loader import Problem, ScenarioError, line_of

    return ScenarioError([Problem(str(path), line_of(str(path), ("workload",)), "workload",
                                  "offered load past what this machine can carry at all: " + "; ".join(verdict.impossible)
                                  + f" (measured in {capacity}); no run of it can be valid: lower the load "
                                    "(--scale), or run it anyway with --over-capacity")])


def _view_socket(address: str, port: int):
    """The view's listening socket, bound now: a port in use is refused before anything starts."""
    from testbed.view.server import ViewAddressError, bind, exposure_warning

    try:
        sock = bind(address, port)
    except ViewAddressError as error:
        raise _fail_input(error) from None
    warning = exposure_warning(address)
    if warning:
        errors.print(warning, style="yellow", highlight=False, markup=False, soft_wrap=True)
    return sock


@app.command()
def view(run_dir: Path = typer.Argument(..., help="A run's results folder, e.g. results/uav-smoke-<run id>."),
         address: str = typer.Option(LOOPBACK, callback=view_address, help="Where the page listens (another "
                                     "address than loopback shows the run to other machines)."),
         port: int = typer.Option(8765, callback=view_port, help="The page's port (0: any free one).")) -> None:
    """Replay a run in the browser with a time slider (a running run is followed live): the topology,
    clients moving, topic owners, per-topic latency against its threshold, migrations, faults, the
    harness guard. Read-only; Ctrl-C stops it.

    Example: testbed view results/uav-smoke-ab12cd
    """
    from testbed.view.server import address_of, serve
    from testbed.view.state import NotARun, RunState, folder_note

    try:
        state = RunState(run_dir)
    except NotARun as error:
        raise _fail_input(error) from None
    note = folder_note(run_dir)
    if note:
        errors.print(f"{run_dir}: {note}", style="yellow", highlight=False, markup=False, soft_wrap=True)
    sock = _view_socket(address, port)
    console.print(f"view of {run_dir}: {address_of(sock)} (Ctrl-C stops it)", highlight=False, markup=False)
    serve(state, sock)


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Report what this machine supports and which backend and shaper `run` would choose.

    Example: testbed doctor
    """
    from testbed import doctor as doctor_mod

    report = doctor_mod.collect()
    if as_json:
        print(json.dumps(report, indent=2))
        return
    table = Table("check", "status", "detail", title="testbed doctor")
    for check in report["checks"]:
        status = "[green]ok[/green]" if check["ok"] else ("[yellow]missing[/yellow]" if not check.get("required") else "[red]FAIL[/red]")
        table.add_row(check["name"], status, check["detail"])
    console.print(table)
    console.print(f"run would use backend [bold]{report['backend']}[/bold] ({report['backend_reason']}) "
                  f"and shaper [bold]{report['shaper']}[/bold] ({report['shaper_reason']})")


def with_control(scenario: Scenario, field: str, value: str, allowed) -> Scenario:
    """The scenario with control.<field> replaced, checked by the same model as a scenario file; a
    setting that a system declares is refused under another system under test (it would configure
    nothing: `--policy` under the NATS cluster)."""
    from pydantic import ValidationError

    from testbed import plugin
    from testbed.scenario.model import Control

    owner = plugin.control_owner(field)
    under = owner and plugin.foreign(scenario.system, owner)
    if under:
        raise ValueError(f"--{field}: control.{field} is a setting of system {owner.name!r}, and {under} has none "
                         f"(the systems that do: {owner.name})")
    data = scenario.control.model_dump(mode="json", exclude_unset=True)
    try:
        control = Control.model_validate({**data, field: value})
    except ValidationError:
        raise ValueError(f"--{field}: {value!r} is not a {field}; allowed: {', '.join(allowed)}") from None
    return scenario.model_copy(update={"control": control})


def with_settle(scenario: Scenario, cap: str) -> Scenario:
    """The scenario with control.settle replaced by a bare cap (the default bounds), checked by the
    same model as a scenario file: how a quick run skips most of the coordinates' wait."""
    from pydantic import ValidationError

    from testbed.scenario.model import Control

    data = scenario.control.model_dump(mode="json", exclude_unset=True)
    try:
        control = Control.model_validate({**data, "settle": cap})
    except ValidationError as error:
        raise ValueError(f"--settle: {error.errors()[0]['msg'].removeprefix('Value error, ')}") from None
    return scenario.model_copy(update={"control": control})


def with_policy(scenario: Scenario, policy: str) -> Scenario:
    return with_control(scenario, "policy", policy, POLICY_CHOICES)


SERVERS_HELP = ("Spread the run over these servers, e.g. tbs1,tbs2,tbs3 (namespace-servers from `testbed servers up 3`) "
                "or root@vm1,root@vm2 (docs/guide/multi-host.md).")


def _servers(text: str | None, scenario) -> list:
    """--servers, else the scenario's emulation.servers, as servers.Server (empty: this machine)."""
    from testbed.emulation import servers as servers_mod

    where = "--servers" if text is not None else "emulation.servers"
    text = text if text is not None else ",".join(scenario.emulation.servers)
    if not text:
        return []
    try:
        return servers_mod.parse(text, where)
    except ValueError as error:
        raise _fail_input(error) from None


@app.command()
def run(path: Path = typer.Argument(..., help="Scenario file."),
        backend: str = typer.Option("auto", callback=checked_as("Emulation", "backend"),
                                    help=" | ".join(("auto", *backends.names()))),
        shaper: str = typer.Option("auto", callback=checked_as("Emulation", "shaper"), help=" | ".join(("auto", *SHAPERS))),
        scale: Optional[float] = typer.Option(None, callback=checked_as("Scenario", "scale"),
                                              help="Multiply counts and rates."),
        interactive: bool = typer.Option(False, "--interactive", help="Open the Mininet CLI on the running network."),
        hold: bool = typer.Option(False, "--hold", help="After the workload and its results, keep the network up "
                                  "until Ctrl-C or SIGTERM, for `testbed exec` and `testbed shell` into its nodes."),
        duration: Optional[str] = typer.Option(None, callback=checked_as("Scenario", "duration"),
                                               help="Override the scenario's duration, e.g. 20s."),
        settle: Optional[str] = typer.Option(None, callback=checked_as("Control", "settle"),
                                             help="Override control.settle: the longest wait for the "
                                             "coordinates before the workload, e.g. 5s (0s: none)."),
        system: Optional[str] = typer.Option(None, help="The system under test (default: the scenario's `system:`, "
                                             "else the one declaring its workload kind), e.g. natscluster."),
        policy: Optional[str] = typer.Option(None, callback=checked_as("Control", "policy"),
                                             help=f"Override control.policy, the topic manager's placement policy "
                                             f"(checked by the system declaring it, refused under any other): "
                                             f"{' | '.join(POLICIES)}."),
        distance: Optional[str] = typer.Option(None, callback=checked_as("Control", "distance"),
                                               help=f"Override control.distance (as --policy, the topic manager's): "
                                               f"{' | '.join(DISTANCES)}."),
        seed: Optional[int] = typer.Option(None, callback=checked_as("Scenario", "seed"),
                                           help="Override the scenario's seed (mobility, zones, link jitter): a repeat."),
        jitter: Optional[str] = typer.Option(None, callback=checked_as("Cities", "jitter"),
                                             help="Override infrastructure.cities.jitter: none | measured (each "
                                             "inter-city link varies as WonderProxy's pings between its cities did)."),
        results: Path = typer.Option(Path("results"), help="Directory for run results."),
        strict: bool = typer.Option(False, "--strict", help="Refuse (exit 2) a load beyond the measured capacity."),
        over_capacity: bool = typer.Option(False, "--over-capacity",
                                           help="Run a load past what this machine can carry at all (to study overload)."),
        capacity: Path = typer.Option(CAPACITY_FILE, help="This machine's measured capacity (make bench-capacity)."),
        servers: Optional[str] = typer.Option(None, help=SERVERS_HELP),
        view: bool = typer.Option(False, "--view", help="Serve the live view of the run in the browser "
                                  "(its address is printed at the start)."),
        view_address: str = typer.Option(LOOPBACK, callback=view_address, help="Where the view listens (another "
                                         "address than loopback shows the run to other machines)."),
        view_port: int = typer.Option(8765, callback=view_port, help="The view's port (0: any free one).")
        ) -> None:
    """Build the emulated network for a scenario, run it, collect results, tear down.

    The system and policy in effect are written to the run's scenario.yaml (system, control.policy) and
    the system to run.json, which the analysis reads.
    The offered load is printed first and compared with this machine's measured capacity: a warning
    when beyond it, a refusal with --strict; a load past what the machine can carry at all (more
    deliveries than any measured run delivered, more frames than the delay line moves) is refused
    unless --over-capacity.

    Example: sudo testbed run scenarios/uav-smoke.yaml --policy pulsar-hash --view
    """
    from testbed import experiment

    if hold and interactive:
        raise _fail_input(ValueError("--hold: not with --interactive (the Mininet CLI already holds the network)"))
    scenario, topology = _load(path, scale, seed, jitter, system)
    view_socket = _view_socket(view_address, view_port) if view else None
    if policy is not None:
        try:
            scenario = with_policy(scenario, policy)
        except ValueError as error:
            raise _fail_input(error) from None
    if distance is not None:
        try:
            scenario = with_control(scenario, "distance", distance, DISTANCES)
        except ValueError as error:
            raise _fail_input(error) from None
    if duration is not None:
        from testbed.units import parse_duration

        try:
            scenario = scenario.model_copy(update={"duration": parse_duration(duration)})
        except ValueError as error:
            raise _fail_input(ValueError(f"--duration: {error}")) from None
    if settle is not None:
        try:
            scenario = with_settle(scenario, settle)
        except ValueError as error:
            raise _fail_input(error) from None
    capacity = load_mod.capacity_file(scenario.workload.client_engine, capacity)
    est, verdict = _offered_load(scenario, topology, capacity)
    for line in load_mod.lines(est, verdict):
        console.print(line, highlight=False, markup=False, soft_wrap=True, style="yellow" if verdict.beyond else None)
    refusal = _impossible(path, verdict, capacity)
    if refusal is not None and not over_capacity:
        raise _fail_input(refusal)
    thin = _thin_access(path, scenario, topology)
    if thin is not None:
        raise _fail_input(thin)
    if strict and verdict.beyond:
        raise _fail_input(ValueError(f"{path}: --strict: offered load beyond this machine's measured capacity "
                                     f"({'; '.join(verdict.beyond)}; {capacity})"))
    from testbed import machine_speed

    today = machine_speed.before_run(est.deliveries_per_s, load_mod.knee(verdict),
                                     load_mod.read_capacity(capacity) if verdict.measured else None,
                                     lambda line: console.print(line, highlight=False, markup=False, soft_wrap=True))
    try:
        # Absolute: processes in Docker hosts start in the read-only source mount, not in our cwd.
        code = experiment.run(scenario, path, backend=backend, shaper=shaper, interactive=interactive,
                              results_root=results.resolve(), console=console, topology=topology,
                              servers=_servers(servers, scenario), view=view_socket, machine_today=today,
                              hold=hold)
    except experiment.BadRunInput as error:
        raise _fail_input(error) from None
    raise typer.Exit(code)


@app.command()
def probe(path: Path = typer.Argument(..., help="Scenario file."),
          backend: str = typer.Option("auto", callback=checked_as("Emulation", "backend"),
                                      help=" | ".join(("auto", *backends.names()))),
          shaper: str = typer.Option("auto", callback=checked_as("Emulation", "shaper"),
                                     help=" | ".join(("auto", *SHAPERS))),
          count: int = typer.Option(100, min=5, max=10000, help="Pings per pair."),
          as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
          servers: Optional[str] = typer.Option(None, help=SERVERS_HELP)) -> None:
    """Build the network, measure RTT between every pair of sites and nodes of interest, compare.

    Exits 1 when a measured median is off by more than max(0.5 ms, 2 %) or p99 by more than +3 ms.

    Example: sudo testbed probe scenarios/mmog-smoke.yaml
    """
    from testbed import probe as probe_mod

    scenario, topology = _load(path)
    try:
        code = probe_mod.main(scenario, backend=backend, shaper=shaper, count=count, as_json=as_json, console=console,
                              topology=topology, servers=_servers(servers, scenario))
    except probe_mod.BadRunInput as error:
        raise _fail_input(error) from None
    raise typer.Exit(code)


RUN_HELP = ("The running experiment: its run id or its results folder (results/<scenario>-<run id>); named also "
            "when one run is running, so that a command meant for one run never reaches another.")


def _exec_in(run: str, node: str, argv: list[str], tty: bool) -> None:
    """Become `argv` inside the node (testbed.emulation.nodeexec): its exit status is ours."""
    import os

    from testbed.emulation import nodeexec

    try:
        target = nodeexec.argv_in(nodeexec.find_run(run, nodeexec.running()), node, argv, tty=tty)
    except ValueError as error:
        raise _fail_input(error) from None
    sys.stdout.flush()
    os.execvp(target[0], target)


@app.command("exec")
def exec_command(run: str = typer.Argument(..., help=RUN_HELP),
                 node: str = typer.Argument(..., help="A node (or a site router) of that run, e.g. swarm1."),
                 command: list[str] = typer.Argument(..., help="The command and its arguments, after --.")) -> None:
    """Run a command inside a node of a running experiment (`testbed run --hold` keeps one up): in the
    node's network namespace, its Docker container, or over ssh on the server holding it. The exit
    status is the command's; an unknown run or node is refused (exit 2) with the list of those there.

    Example: sudo testbed exec ab12cd swarm1 -- ping -c 3 10.1.0.3
    """
    _exec_in(run, node, command, tty=False)


@app.command()
def shell(run: str = typer.Argument(..., help=RUN_HELP),
          node: str = typer.Argument(..., help="A node (or a site router) of that run, e.g. swarm1.")) -> None:
    """Open an interactive shell ($SHELL, else bash) inside a node of a running experiment; `exit`
    leaves it, the run's teardown ends it.

    Example: sudo testbed shell ab12cd bzone1
    """
    from testbed.emulation import nodeexec

    try:
        argv = nodeexec.shell(nodeexec.find_run(run, nodeexec.running()), node)
    except ValueError as error:
        raise _fail_input(error) from None
    _exec_in(run, node, argv, tty=sys.stdin.isatty())


topic_app = typer.Typer(help="Act on the topics of a running experiment.", no_args_is_help=True,
                        epilog="\b\nExample: sudo testbed topic set-threshold ab12cd follow_leader-swarm1 30ms")
app.add_typer(topic_app, name="topic")


@topic_app.command("set-threshold")
def topic_set_threshold(run_id: str = typer.Argument(..., help="The running experiment's run id."),
                        topic: str = typer.Argument(..., help="Topic, e.g. follow_leader-swarm1."),
                        threshold: str = typer.Argument(..., callback=checked_as("Topic", "threshold"),
                                                        help="End-to-end latency threshold, e.g. 40ms.")) -> None:
    """Set a topic's latency threshold Lth(t) in the running experiment's ZooKeeper.

    Example: sudo testbed topic set-threshold ab12cd follow_leader-swarm1 30ms
    """
    import functools

    from testbed.emulation import runstate
    from testbed.emulation.netns import connect_in
    from testbed.roles.launch import node_metadata
    from testbed.systems.pubsub.metadata import ZK_PORT, check_topic
    from testbed.units import parse_duration

    try:
        runstate.check_run_id(run_id)
        check_topic(topic)
        seconds = parse_duration(threshold)
    except ValueError as error:
        raise _fail_input(error) from None
    run = runstate.known_runs().get(run_id)
    if not run or not runstate.is_live(run):
        raise _fail_input(ValueError(f"run {run_id} is not running (testbed run ...)"))
    clouds = [n for n, role in run.get("roles", {}).items() if role == "cloud"]
    if not clouds:
        errors.print(f"run {run_id} has no cloud node: no ZooKeeper to set thresholds in")
        raise typer.Exit(EXIT_FAILURE)
    cloud = clouds[0]
    if cloud in run.get("elsewhere", {}):
        errors.print(f"run {run_id}'s ZooKeeper is in {cloud} on server {run['elsewhere'][cloud]}, another machine: "
                     "set-threshold reaches nodes on this machine only for now")
        raise typer.Exit(EXIT_FAILURE)
    meta = node_metadata(f"{run['ips'][cloud]}:{ZK_PORT}", functools.partial(connect_in, run["nodes"][cloud]))
    meta.start()
    try:
        meta.set_threshold(topic, seconds)
        console.print(f"{topic}: threshold {seconds * 1e3:g} ms (run {run_id})", highlight=False)
    finally:
        meta.stop()


@app.command()
def clean(run_id: Optional[str] = typer.Argument(None, help="One run's id; all runs when omitted."),
          force: bool = typer.Option(False, "--force", help="Also tear down runs whose controller is alive."),
          servers: Optional[str] = typer.Option(None, help="Also clean these servers (over ssh), e.g. tbs1,tbs2,tbs3."),
          check: bool = typer.Option(False, "--check", help="Remove nothing: list what the testbed made that is "
                                     "still here (live runs included); exit 1 if anything is.")
          ) -> None:
    """Remove what crashed or killed runs left: namespaces, links, relays, processes, containers,
    and namespace-servers whose sshd outlived `servers down`.

    Example: sudo testbed clean
    """
    from testbed.emulation import cleanup, leftovers
    from testbed.emulation import servers as servers_mod

    if check:
        found = leftovers.left()
        for item in found:
            console.print(item.text, highlight=False, markup=False, soft_wrap=True)
        console.print(f"clean --check: {len(found)} item(s) left")
        raise typer.Exit(1 if found else 0)
    try:
        removed, notes = cleanup.clean(run_id, force=force)
        remote = servers_mod.parse(servers) if servers else []
    except ValueError as error:
        raise _fail_input(error) from None
    notes += servers_mod.clean(remote, sys.executable, run_id, force=force)
    for line in removed + notes:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(f"clean: removed {len(removed)} leftover item(s)" + (f" of run {run_id}" if run_id else ""))


@app.command()
def gather(run_dir: Path = typer.Argument(..., help="The run's folder here (results/<scenario>-<run id>)."),
           servers: str = typer.Option(..., help="The servers it ran on, e.g. vm1,vm2,vm3.")) -> None:
    """Gather a run's folder from servers whose file system is not ours, again: after a harness that
    died, or a server that did not answer at the run's end. What is already here is kept.

    Example: sudo testbed gather results/uav-smoke-ab12cd --servers vm1,vm2,vm3
    """
    raise typer.Exit(EXIT_FAILURE if _gather(run_dir, servers) else 0)


def _gather(run_dir: Path, servers: str, say=console.print) -> list:
    """Gather run_dir from the servers whose file system is not ours (what is here is kept); says
    how many answered and returns the problems."""
    from testbed.emulation import servers as servers_mod
    from testbed.emulation.runfiles import RunFiles

    try:
        chosen = servers_mod.parse(servers, least=1)
    except ValueError as error:
        raise _fail_input(error) from None
    if not run_dir.is_dir():
        raise _fail_input(ValueError(f"{run_dir}: no such run folder here"))
    elsewhere = [s for s in chosen if not s.on_this_machine]
    problems = RunFiles(elsewhere, None, run_dir.resolve()).gather()
    for problem in problems:
        errors.print(f"not gathered from {problem}")
    say(f"gather: {len(elsewhere) - len(problems)} of {len(elsewhere)} servers into {run_dir}"
        + (" (the others share this machine's files)" if len(elsewhere) < len(chosen) else ""))
    return problems


servers_app = typer.Typer(help="Servers a run spreads over: check machines, or make namespace-servers (several "
                          "ssh-reachable 'servers' on this machine).",
                          no_args_is_help=True, epilog="\b\nExample: sudo testbed servers up 3 --isolated")
app.add_typer(servers_app, name="servers")


@servers_app.command("up")
def servers_up(count: int = typer.Argument(3, help="How many (2-20)."),
               isolated: bool = typer.Option(False, "--isolated", help="Each also with its own PID and mount "
                                             "namespaces (own processes, /tmp, /run/testbed, results/): used as "
                                             "another machine is, over ssh only.")) -> None:
    """Make COUNT namespace-servers (tbs1, tbs2, ...), each a network namespace with its own sshd on
    a management bridge; `testbed run X --servers tbs1,tbs2,tbs3` then spreads a run over them.

    Example: sudo testbed servers up 3 --isolated
    """
    from testbed.emulation import servers as servers_mod

    try:
        made = servers_mod.up(count, isolated=isolated)
    except (ValueError, servers_mod.ServerError) as error:
        raise _fail_input(error) from None
    for server in made:
        console.print(f"{server.name}: {server.user}@{server.host} (ssh -F {server.ssh_config})", highlight=False)
    console.print(f"--servers {','.join(s.name for s in made)}", highlight=False)


@servers_app.command("check")
def servers_check(hosts: list[str] = typer.Argument(..., help="Servers: [user@]host or namespace-server names."),
                  as_json: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Check machines before a run over them, as the run would reach them: ssh without a password,
    root or sudo, the project at this path and this commit, the tools a node needs (`testbed doctor`
    there), the MTU towards each other server, the clock against ours. Exit 1 if any check fails.

    Example: testbed servers check vm1 vm2 admin@vm3
    """
    from dataclasses import asdict

    from testbed.emulation import server_check
    from testbed.emulation import servers as servers_mod

    try:
        chosen = servers_mod.parse(",".join(hosts), "servers check", least=1)
    except ValueError as error:
        raise _fail_input(error) from None
    project = Path(__file__).resolve().parents[1]
    # one ssh connection per command, none kept: a check killed halfway leaves nothing behind
    findings = server_check.survey(chosen, None, project, sys.executable)
    failed = [f for f in findings if not f.ok]
    if as_json:
        print(json.dumps({"ok": not failed, "findings": [asdict(f) for f in findings]}, indent=2))
    else:
        table = Table("server", "check", "status", "detail", title="testbed servers check")
        for f in findings:
            table.add_row(f.server, f.check, "[green]ok[/green]" if f.ok else "[red]FAIL[/red]", f.detail)
        console.print(table)
        console.print(f"{len(chosen)} server(s): " + ("every check passed" if not failed else
                                                      f"{len(failed)} check(s) failed"), highlight=False)
    if failed:
        raise typer.Exit(1)


@servers_app.command("down")
def servers_down() -> None:
    """Remove the namespace-servers: the connections to them, every process in their namespaces
    (also of servers whose name is already gone), the namespaces and the management bridge.

    Example: sudo testbed servers down
    """
    from testbed.emulation import servers as servers_mod

    removed = servers_mod.down()
    for line in removed:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(f"servers down: removed {len(removed)} item(s)")


def _track_id(run_dir: Path, text: str) -> bytes:
    """A message's tracking id: given as its 32 hex digits, or as the trace's msg_id (<producer>:<seq>),
    looked up in the run's traces."""
    from testbed.tracking.msgid import parse

    if ":" not in text:
        try:
            return parse(text).pack()
        except ValueError as error:
            raise _fail_input(error) from None
    needle = f'"msg_id":{json.dumps(text)},'.encode()
    for path in sorted((run_dir / "traces").glob("*.jsonl")):
        with path.open("rb") as handle:
            for line in handle:
                if needle in line:
                    track_id = json.loads(line).get("track_id")
                    if not track_id:
                        raise _fail_input(ValueError(f"{path}: {text} was delivered without a tracking id "
                                                     "(the run's tracking strategy was none)"))
                    return parse(track_id).pack()
    raise _fail_input(ValueError(f"{run_dir}/traces: no delivered message has msg_id {text}"))


@app.command()
def track(run_dir: Path = typer.Argument(..., help="A run directory (results/<run>)."),
          message: str = typer.Argument(..., help="The message: its tracking id (32 hex digits, the trace's "
                                                  "track_id) or its msg_id (<producer>:<seq>)."),
          as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
          servers: Optional[str] = typer.Option(None, help="The servers the run spread over, e.g. vm1,vm2,vm3: "
                                                "their brokers' histories are gathered here first (as `testbed gather` "
                                                "does), for a run whose end did not gather them.")) -> None:
    """Trace a message back (Jun and Astley's message tracking): the brokers it crossed and the
    subscribers it reached, from the brokers' tracking histories, with each entry's expected
    false-positive probability.

    Example: testbed track results/tracking-smoke-ab12cd swarm1-u1:120
    """
    from testbed.tracking.store import read_run
    from testbed.tracking.traceback import Traceback

    if not (run_dir / "run.json").exists() and not (run_dir / "tracking").is_dir():
        raise _fail_input(ValueError(f"{run_dir}: not a run directory"))
    if servers is not None:
        _gather(run_dir, servers, say=errors.print)  # stdout stays the answer (--json)
    raw = _track_id(run_dir, message)
    try:
        answer = Traceback(read_run(run_dir)).query(raw).to_json()
    except ValueError as error:
        raise _fail_input(ValueError(f"{run_dir}: {error}")) from None
    if as_json:
        console.print_json(json.dumps(answer))
        return
    table = Table(title=f"message {answer['id']}", show_header=False)
    table.add_row("publisher", f"{answer['publisher'] or '?'} at {answer['origin'] or '? (unknown broker)'}"
                  + ("" if answer["published"] else "  (not in its publisher history)"))
    table.add_row("timestamp", f"{answer['timestamp_ms'] / 1000:.3f} (publisher's clock + skew adjustment)")
    table.add_row("brokers", ", ".join(answer["brokers"]) or "none")
    for subscriber, via in answer["delivered"].items():
        efpp = max(answer["efpp"].get(f"{b}/sub/{subscriber}", 0.0) for b in via)
        table.add_row(f"  -> {subscriber}", f"via {', '.join(via)}  (efpp {efpp:.2g})")
    table.add_row("expected wrong entries", f"{answer['expected_false_entries']:.3g}")
    table.add_row("cost", f"{answer['brokers_consulted']} brokers, {answer['filters_consulted']} filters consulted")
    console.print(table)


@app.command()
def figures(runs: Optional[list[Path]] = typer.Argument(None, help="Run directories; every run in --results when omitted."),
            results: Path = typer.Option(Path("results"), help="Results directory."),
            out: Path = typer.Option(Path("results/figures"), help="Where to write figures."),
            master: Optional[str] = typer.Option(None, help="Spark master (default local[*])."),
            paper: bool = typer.Option(False, "--paper", help="The same as `testbed paper` (every experiment and figure).")) -> None:
    """Reduce run traces with PySpark and render the paper's figures (Fig. 7, 8, 9) as PNG.

    Example: testbed figures results/uav-smoke-ab12cd --out results/figures
    """
    if paper:
        paper_command(out=Path("results/paper"), reuse=False, reuse_runs=False, scale="smoke", quick=False,
                      policies=",".join(POLICY_CHOICES), systems=None, repeats=2, asides=True, master=master,
                      resume=False, only=None, check=False)
    if not runs:
        runs = sorted(p.parent for p in results.glob("*/run.json"))
    if not runs:
        errors.print(f"figures: no run directories in {results} (run a scenario first: testbed run ...)")
        raise typer.Exit(EXIT_BAD_INPUT)
    from analysis.__main__ import main as analysis_main

    argv = ["figures", *map(str, runs), "--out", str(out), *(["--master", master] if master else [])]
    raise typer.Exit(analysis_main(argv))


@app.command()
def compare(run_dirs: list[Path] = typer.Argument(..., help="Two or more runs' results folders, e.g. "
                                                 "results/uav-smoke-<run id>."),
            out: Path = typer.Option(Path("results/figures/compare.png"), help="Where the figure goes (PNG)."),
            master: Optional[str] = typer.Option(None, help="Spark master (default local[*]).")) -> None:
    """Runs side by side: scenario, policy, the harness's validity, p50/p95/p99 E2E latency and the
    violation ratio per topic class (the paper comparison's reduction), migrations, client downtime
    and the share of deliveries, as a table and a figure.

    Runs of different systems on the same workload sit side by side, each named by its system and policy
    or mode (epulsar/pulsar-hash, natscluster/home).

    Example: testbed compare results/uav-smoke-ab12cd results/uav-smoke-cd34ef --out results/figures/compare.png
    """
    from analysis import side_by_side

    try:
        raise typer.Exit(side_by_side.main(run_dirs, out, master, console))
    except side_by_side.NotARun as error:
        raise _fail_input(error) from None


@app.command("paper")
def paper_command(out: Path = typer.Option(Path("results/paper"), help="Where the figures and the index go."),
                  reuse: bool = typer.Option(False, "--reuse", help="Redraw microbenchmark figures from their "
                                             "results/bench JSON when it exists instead of running them."),
                  reuse_runs: bool = typer.Option(False, "--reuse-runs", help="Take the newest complete run per "
                                                  "scenario and policy in OUT/runs instead of running it again."),
                  scale: str = typer.Option("smoke", help="smoke (uav-smoke, mmog-smoke: ~2 min each) | full "
                                            "(uav.yaml, mmog.yaml: 10 min each)"),
                  quick: bool = typer.Option(False, "--quick", help="Microbenchmarks that run use their --quick sweep."),
                  policies: str = typer.Option(",".join(POLICY_CHOICES), help="Comma-separated policies to run."),
                  systems: Optional[str] = typer.Option(None, help="Comma-separated other systems under test run on "
                                                        "the same experiments, a series each (default: every system "
                                                        "that runs the workload; '' none)."),
                  repeats: int = typer.Option(2, min=1, max=20, help="Runs per scenario and policy, each with its own "
                                              "seed; the index gives 95 % intervals over them."),
                  asides: bool = typer.Option(True, "--asides/--no-asides", help="Also run ePulsar once as the paper "
                                              "ran the UAV case (8x8 UAVs, 50 m/s, 10 min, rate scaled; ~14 min) "
                                              "and the MMOG smoke under one-way distances (~2 min)."),
                  master: Optional[str] = typer.Option(None, help="Spark master (default local[*])."),
                  resume: bool = typer.Option(False, "--resume", help="Skip the runs and benchmarks OUT/index.json "
                                              "says were done at the commit checked out now (an interrupted paper "
                                              "goes on where it stopped)."),
                  only: Optional[str] = typer.Option(None, help="Comma-separated index entries (fig9, bad-sim, ...): "
                                                     "run only the steps feeding them; the index lists the others "
                                                     "as not run."),
                  check: bool = typer.Option(False, "--check", help="Run nothing: say which entries of OUT/index.json "
                                             "are current, stale (the files changed since their commit), missing "
                                             "or unknown; exit 0 only when all are current.")) -> None:
    """Run every experiment at this machine's scale, render every figure, write an index beside the paper's numbers.

    Microbenchmarks (Fig. 3b-7b), then the UAV and MMOG scenarios once per policy, then the PySpark
    comparison (Fig. 8, 9 per policy, violation ratios), then OUT/index.md, index.html and index.json
    (each entry's commit, date, scale, runs, guard verdict and time). A failing step is reported in the
    index and the exit code (1); the others still run.

    Example: sudo testbed paper --reuse    (reuse results/bench/*.json, run the 6 smoke experiments)
    Example: testbed paper --check         (do the index's numbers still describe this code?)
    """
    from testbed import paper as paper_mod
    from testbed import paper_figures

    if check:
        from testbed import paper_check

        raise typer.Exit(paper_check.check(out))
    import click

    if scale not in paper_figures.SCALES:
        raise typer.BadParameter(f"{scale!r}; allowed: {', '.join(paper_figures.SCALES)}", click.get_current_context(),
                                 param_hint="'--scale'")
    chosen = tuple(p.strip() for p in policies.split(",") if p.strip())
    unknown = [p for p in chosen if p not in POLICY_CHOICES]
    if unknown or not chosen:
        raise typer.BadParameter(f"{', '.join(unknown) or 'none given'}; allowed: {', '.join(POLICY_CHOICES)}",
                                 click.get_current_context(), param_hint="'--policies'")
    from testbed import plugin

    other = None if systems is None else tuple(s.strip() for s in systems.split(",") if s.strip())
    if other and any(plugin.system_named(s) is None for s in other):
        raise typer.BadParameter(f"{', '.join(s for s in other if plugin.system_named(s) is None)}; registered: "
                                 f"{', '.join(s.name for s in plugin.systems())}", click.get_current_context(),
                                 param_hint="'--systems'")
    chosen_entries = tuple(e.strip() for e in (only or "").split(",") if e.strip())
    known = paper_figures.depends(paper_figures.Options(scale=scale, policies=chosen, asides=asides, systems=other))
    if only is not None and (not chosen_entries or any(e not in known for e in chosen_entries)):
        raise typer.BadParameter(f"{', '.join(e for e in chosen_entries if e not in known) or 'none given'}; "
                                 f"allowed: {', '.join(known)}", click.get_current_context(), param_hint="'--only'")
    command = "testbed paper" + "".join(f" {a}" for a in sys.argv[2:]) if sys.argv[1:2] == ["paper"] else \
        "testbed figures --paper"
    options = paper_figures.Options(out=out, reuse=reuse, reuse_runs=reuse_runs, scale=scale, quick=quick,
                                    policies=chosen, systems=other, repeats=repeats, asides=asides, master=master,
                                    command=command, resume=resume, only=chosen_entries)
    raise typer.Exit(paper_mod.main(options))


def _bench_out(args: list[str]) -> Path | None:
    """The JSON a benchmark's `--out PATH` (or `--out=PATH`) sends its result to, if given."""
    for i, arg in enumerate(args):
        if arg == "--out" and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--out="):
            return Path(arg.split("=", 1)[1])
    return None


@app.command("bench", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench_command(ctx: typer.Context,
                  name: Optional[str] = typer.Argument(None, help="A system's benchmark; none: list them.")) -> None:
    """Run a benchmark a system brings (its manifest declares it); its options follow its name.

    Example: sudo testbed bench bad --quick     (make bench-bad ARGS=--quick does the same)
    """
    import os

    from testbed import plugin

    benches = plugin.benchmarks()
    if name is None:
        for bench_name, (system, bench) in benches.items():
            print(f"{bench_name:<{max(map(len, benches))}} {system.name:<9} ~{bench.minutes:g} min  {bench.about}")
        return
    if name not in benches:
        raise _fail_input(ValueError(f"no system brings a benchmark {name!r}; known: {', '.join(benches)} "
                                     "(the harness's own: make bench-emulation, bench-capacity, ...)"))
    system, bench = benches[name]
    from testbed import provenance
    from testbed.paper_figures import BENCH_DIR

    provenance.mark(_bench_out(ctx.args) or BENCH_DIR / f"{name}.json")  # which code makes its JSON: the paper reads it
    argv = [sys.executable, "-m", f"{system.package}.{bench.program}", *bench.args, *ctx.args]
    os.execv(argv[0], argv)  # its own process: its exit code, its Ctrl-C, its output straight through


plain_help(app)  # after the last command: every one of them helps without typer's markup escapes


def main() -> None:
    """Entry point: one clear line for an unexpected failure (TESTBED_DEBUG=1 shows the traceback).

    Re-runs itself under the Containernet venv when that is where Docker hosts can be built
    (testbed.emulation.choose.reexec_argv), so `.venv/bin/testbed run` gets them too."""
    import os

    from testbed.emulation.choose import reexec_argv

    target = reexec_argv(sys.argv[1:])
    if target is not None:
        os.execve(target[0][0], target[0], target[1])
    try:
        app()
    except KeyboardInterrupt:
        errors.print("interrupted")
        sys.exit(130)
    except Exception as error:  # noqa: BLE001 - the CLI's last word on anything unforeseen
        if os.environ.get("TESTBED_DEBUG"):
            raise
        print(f"error: {type(error).__name__}: {error} (TESTBED_DEBUG=1 for the traceback)", file=sys.stderr)
        sys.exit(EXIT_FAILURE)


if __name__ == "__main__":
    main()
