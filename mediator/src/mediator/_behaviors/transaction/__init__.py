"""`@transactional` and `TransactionBehavior`: the behavior, its flow, its drivers."""
