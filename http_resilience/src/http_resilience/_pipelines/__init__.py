"""The pipelines that compose the strategies: the custom one and the standard one.

`custom` holds the fluent `ResiliencePipeline`, a list of steps a user picks;
`standard` holds the flat `HttpResilienceOptions` of the standard pipeline,
which takes its defaults from the strategies and is the builder's preset
(`standard_steps`). Neither is a strategy: they are the only modules that
know every strategy by name.
"""
