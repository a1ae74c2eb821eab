"""Layer 3, plan: policies, the content rules and the plan of what a reduction does.

A plan is pure data computed from a scan; nothing here touches the logdir.
"""
