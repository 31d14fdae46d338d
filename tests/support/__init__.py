"""What tests of every package share: the process harness (real name servers and brokers on
free loopback ports), brokers in this process, a broker context around a store of the test's
own, `wait_until`, and clocks that move only when told."""
