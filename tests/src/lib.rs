//! Helpers shared by the integration tests: where the real Kafka fixtures are.
