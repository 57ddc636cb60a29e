"""The light-transport walk, written once: the path state (``state.py``), the scattering vertex on
a surface or in a medium (``vertex.py``), the steps every integrator composes — emitter hit with
MIS, next-event estimation, BSDF/phase sampling, Russian roulette — each with its adjoint beside it
(``steps.py``), and the media steps: free-flight sampling and shadow-ray transmittance
(``media.py``). Integrators (tirender/integrators) are short compositions of these."""
