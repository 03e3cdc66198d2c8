#!/bin/bash
# Captures the squeue outputs of tests/data/slurm/squeue-24.11.5-* from a real SLURM 24.11.5 (Debian
# trixie's packages), the same jobs as the 22.05.8 captures that the integration test's cluster makes.
# Run as root on any Linux machine; not part of the test suite:
#   debootstrap --variant=minbase --include=slurmctld,slurmd,slurm-client,munge trixie /tmp/trixie
#   mount -t proc proc /tmp/trixie/proc; mount --bind /dev /tmp/trixie/dev; mount --bind /sys /tmp/trixie/sys
#   cp capture-in-chroot.sh /tmp/trixie/root/ && chroot /tmp/trixie /root/capture-in-chroot.sh
# The outputs land in /tmp/trixie/root/out/. squeue --json=v0.0.40 / v0.0.41 / v0.0.42 give the
# shapes of SLURM 23.11, 24.05 and 24.11 (their data_parser plugins).
set -u
B=/root/c; rm -rf $B; mkdir -p $B/state $B/spool $B/munge $B/jobs; chmod 755 $B; chmod 711 $B/munge
H=$(hostname -s)
cat > $B/slurm.conf <<EOC
ClusterName=mdstest
SlurmctldHost=$H(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$B/munge/munge.sock
SlurmUser=root
SlurmdUser=root
SlurmctldPort=26817
SlurmdPort=26818
StateSaveLocation=$B/state
SlurmdSpoolDir=$B/spool
SlurmctldPidFile=$B/slurmctld.pid
SlurmdPidFile=$B/slurmd.pid
SlurmctldLogFile=$B/slurmctld.log
SlurmdLogFile=$B/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$B/jobcomp.txt
MpiDefault=none
ReturnToService=2
MinJobAge=600
SlurmdParameters=config_overrides
NodeName=$H NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP
EOC
echo "CgroupPlugin=disabled" > $B/cgroup.conf
export SLURM_CONF=$B/slurm.conf
mungekey --create --keyfile=$B/munge/key --force; chmod 600 $B/munge/key
/usr/sbin/munged --foreground --force --socket=$B/munge/munge.sock --key-file=$B/munge/key --log-file=$B/munge/log --pid-file=$B/munge/pid --seed-file=$B/munge/seed > $B/munged.out 2>&1 & echo $! > $B/munged.pidx
sleep 1
/usr/sbin/slurmctld -D -f $SLURM_CONF > $B/ctld.out 2>&1 & echo $! > $B/ctld.pidx
/usr/sbin/slurmd -D -f $SLURM_CONF -N $H > $B/d.out 2>&1 & echo $! > $B/d.pidx
for i in $(seq 120); do sinfo -h -o %T 2>/dev/null | grep -qE 'idle|mixed' && break; sleep 0.25; done
sinfo
LONG=tr11-176B-ml-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx-round3
S() { sbatch --parsable --chdir=$B/jobs -o "$B/jobs/%j.out" "$@"; }
S --job-name=$LONG --wrap 'sleep 100'
S --job-name=$LONG --dependency=singleton --wrap 'sleep 5'
S --job-name=tr1-13B-round3 --array=1-3%1 --wrap 'sleep 100'
S --job-name=starts-later --begin=now+1hour --wrap 'sleep 5'
S --job-name=held-job --hold --wrap 'sleep 5'
S --job-name=too-big --nodes=5 --wrap 'sleep 5'
S --job-name=crashes --wrap 'exit 3'
S "--job-name=with|pipe and spaces" --wrap 'sleep 100'
sleep 8
OUT=/root/out; mkdir -p $OUT
squeue -h -t all -o '%A|%i|%F|%K|%T|%r|%V|%S|%e|%M|%u|%P|%N|%j' > $OUT/squeue-24.11.5-text.txt
for v in v0.0.40 v0.0.41 v0.0.42; do squeue --json=$v -t all > $OUT/squeue-24.11.5-$v.json; echo "json $v rc=$?"; done
squeue --json > $OUT/squeue-24.11.5-default.json
squeue --json -t all > $OUT/squeue-24.11.5-all.json; echo "json -t all rc=$?"
squeue --json --name=crashes -t all > $OUT/squeue-24.11.5-name.json; echo "json name rc=$?"
kill $(cat $B/ctld.pidx); sleep 2
time squeue --json > $OUT/squeue-24.11.5-unreachable.json 2> $OUT/unreachable-json.err; echo "down json rc=$?"
time squeue -h -o '%i' > /dev/null 2> $OUT/unreachable-text.err; echo "down text rc=$?"
cat $OUT/*.err
/usr/sbin/slurmctld -D -f $SLURM_CONF > $B/ctld2.out 2>&1 & echo $! > $B/ctld.pidx
sleep 3; scancel --user=root; sleep 3
kill $(cat $B/d.pidx) $(cat $B/ctld.pidx); sleep 2; kill $(cat $B/munged.pidx)
