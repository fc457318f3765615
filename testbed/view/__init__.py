"""The live view: a local web page that shows a run as it goes (or a finished run, replayed) from
what the run already records in its results folder: the topology, clients moving between sites,
which broker owns each topic, per-topic latency against its threshold, migrations, faults and the
harness guard's verdict. It only reads; nothing on the page reaches the experiment or a shell."""
