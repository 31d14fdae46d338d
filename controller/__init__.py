"""The controller of controller mode (RocketMQ 5's): which broker of a group is master,
elected from the group's SyncStateSet when its master goes silent. The state machine is pure
code (state.py); each change is an etcd transaction fenced by revisions (etcd_store.py);
brokers talk to it over gRPC (server.py, client.py)."""
