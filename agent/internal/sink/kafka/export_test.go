package kafka

// BrokerAddr is the address of the kfake broker (the Kafka stand-in) TestMain starts, for the
// tests of package kafka_test, which build the sink as the agent does (through the sink table).
func BrokerAddr() string { return broker.Addr }
