"""The fallback: a function of yours answers when the call has given up.

The strategy's folder: `options` (the step `ResiliencePipeline.add_fallback`
adds, its check of the function, its build) and `strategy` (what asks the
function and marks its answer, and the two drivers).
"""
