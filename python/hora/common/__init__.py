"""hora.common: the framework-neutral core of hora's Python frontends (Horovod's
horovod/common). Each frontend (hora.torch, hora.tensorflow, ...) is a thin adapter on top: it
turns its framework's tensors into buffers and back, and adds what is its framework's own
(autograd, optimizers, state of models); everything else is here, once.

    basics         init / shutdown, the process's place in the job, capabilities, timeline
    process_sets   ProcessSet, global_process_set, add_process_set, remove_process_set
    exceptions     HoraInternalError (HorovodInternalError) and its kinds, HostsUpdatedInterrupt
    ops            the reduce ops (Average, Sum, ...) and the rules for choosing one
    requests       requests to the engine on raw buffers: names, enqueue, the engine's outputs,
                   argument checks that need no tensor, join, barrier
    handles        the int handles of async calls: poll, synchronize
    elastic        the elastic run loop and the State / ObjectState base classes
    identity       the rank numbers, asked from the engine once per generation
    native         hands the engine to a framework's native op library (hora.tensorflow's)

Nothing is imported here: a frontend imports the modules it uses.
"""
