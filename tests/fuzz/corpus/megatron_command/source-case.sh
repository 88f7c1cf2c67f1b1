source env.sh
. ./env.sh
case $1 in
  *) python x.py --pipeline-model-parallel-layout "Et|(tt|)*30L" --hybrid-layer-pattern "M*|M-/MM" ;;
esac
