"""What runs inside nodes: each system under test is a package of programs started as processes in
a node (never imported by the harness's own process except for their pure parts)."""
