sbatch <<EOF
#SBATCH --nodes=2 --ntasks-per-node=8
srun bash -c "python pretrain_gpt.py --tensor-model-parallel-size 2 --num-layers 8"
EOF
