"""The gate's parts, one step each: the question about a call (`check`), the call as the
parts pass it (`call`), consulting a provider (`consult`), planning what an answer
records (`plan`), grants (`grants`), execution (`execute`), the store and audit steps
(`journal`, `offload`), the typed outcomes (`results`, `verdict`), and the methods
for agent frameworks (`frameworks`). `ToolRunner`
(`sandbox.approval.runner`) is the facade over them."""
