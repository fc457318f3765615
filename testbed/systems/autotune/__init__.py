"""The auto-tuned batching publisher (Balasubramanian et al.) on the emulated WAN: the publisher process
with its receive side, data store, worker pool and tuned Main Publisher Thread (`publisher`), the
request sources (`sources`), and a subscriber that can be made slow (`subscriber`). The broker is a real
nats-server with JetStream: each publisher variant's messages go to its own stream, whose
acknowledgements the workers wait for and whose bounded size pushes back when the subscriber lags. The
control rule itself is pure: testbed.policies.autotune."""
