"""Message tracking with Bloom-filter histories (Jun and Astley, "Low-Overhead Message Tracking for
Distributed Messaging"): message ids, filters, histories, the per-broker recorder, its files, and the
traceback query. Pure code: the tracker process (testbed.systems.pubsub.tracker) feeds it messages, the
CLI and the analysis read its files."""
