#!/bin/bash
#SBATCH --nodes=1
sbatch ../outside/env.sh
sbatch sub/job.sh
