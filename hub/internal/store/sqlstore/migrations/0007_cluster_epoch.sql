-- cluster_epoch moves with every change of a cluster's registration (registration, labels,
-- revocation, release, deletion, credential rotation) and never with a heartbeat: every hub
-- replica caches which cluster holds which credential and compares this value on each agent
-- call, so that a change made through any replica takes effect at the agent's next call.
INSERT INTO hub_state (key, value) VALUES ('cluster_epoch', 0);
