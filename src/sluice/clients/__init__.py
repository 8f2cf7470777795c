"""Protocol clients shared by the bus backends and the connectors.

They depend on nothing of sluice's but `sluice.sdk` (for its errors), so a connector may use them
without depending on the bus (DESIGN §7). `sluice.clients.rocketmq` speaks RocketMQ's remoting
protocol.
"""
