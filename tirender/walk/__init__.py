"""The light-transport walk, written once: the path state (``state.py``), the scattering vertex on
a surface or in a medium (``vertex.py``), the steps every integrator composes — emitter hit with
MIS, next-event estimation, BSDF/phase sampling, Russian roulette — each with its adjoint beside it
(``steps.py``), the media steps: free-flight sampling and shadow-ray transmittance
(``media.py``), and the attached derivatives of a vertex that moves with the geometry (``attached.py``). Integrators (tirender/integrators) are short compositions of these."""
