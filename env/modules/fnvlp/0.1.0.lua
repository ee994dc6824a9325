-- Lmod module of an fnvlp checkout (issue 29): `module use CHECKOUT/env/modules; module load fnvlp`.
-- Puts the executables of the build on PATH and sets what the SLURM scripts read (FNVLP_ROOT,
-- FNVLP_BUILD_DIR; slurm/common.sh documents the rest). The build is the one env/cluster-build.sh
-- makes: CHECKOUT/build, or FNVLP_BUILD_DIR when it is set before loading.
-- A site adds its own dependencies here, e.g. depends_on("openmpi", "hdf5", "kokkos").
local root = myFileName():gsub("/env/modules/fnvlp/[^/]+$", "")
local build = os.getenv("FNVLP_BUILD_DIR") or pathJoin(root, "build")

whatis("Name: fnvlp")
whatis("Version: " .. myModuleVersion())
whatis("Description: false-negative-aware vision-language pretraining, MPI batch jobs + SLURM scripts")
help([[
fnvlp ]] .. myModuleVersion() .. [[ from ]] .. root .. [[

  sbatch ]] .. pathJoin(root, "slurm/pretrain_4m.sh") .. [[

  FNVLP_DRY_RUN=1 bash ]] .. pathJoin(root, "slurm/pretrain_4m.sh") .. [[   (print the job graph)
Executables (fnvlp-shard, fnvlp-pretrain, ...) from ]] .. build .. [[.
]])

pushenv("FNVLP_ROOT", root)
pushenv("FNVLP_BUILD_DIR", build)
prepend_path("PATH", pathJoin(build, "analysis"))
prepend_path("PATH", pathJoin(build, "jobs"))
prepend_path("PATH", pathJoin(build, "data_prep"))
