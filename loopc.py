import time,os
open('/tmp/audit6/lc.pid','w').write(str(os.getpid()))
n=0
t=time.time()
while time.time()-t<3:
    n+=1
    if n%100000==0: open('/tmp/audit6/lc.cnt','w').write(str(n))
